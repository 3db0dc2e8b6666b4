import os

for name in (".ssh/id_rsa", "notes.json", "owned.json"):
    try:
        with open(os.path.join(T["home"], name), "w") as target:
            target.write('{"owned": true}')
    except OSError:
        pass
