"""The command line's edge: what a user sees when the environment is not set up."""

from harness import cli


def test_a_missing_dependency_is_one_line_not_a_traceback(monkeypatch, capsys):
    def needs_torch(args, host):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setitem(cli.COMMANDS, "list", needs_torch)
    assert cli.main(["list"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness: error: torch is not installed for ")
