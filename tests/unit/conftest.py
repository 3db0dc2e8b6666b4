"""Unit tests start no worker of the harness's: tests that do (and those that compile) are
end-to-end tests (tests/e2e/). Held here, not by convention: a unit test that starts a worker or
probes a launcher fails and says where it belongs."""

import pytest

from harness.worker import parent, sandbox

E2E = "a unit test starts no {} of the harness's: this test belongs under tests/e2e/"


@pytest.fixture(autouse=True)
def no_workers(monkeypatch):
    def refuse(what):
        def refused(*args, **kwargs):
            raise AssertionError(E2E.format(what))
        return refused

    monkeypatch.setattr(parent.Worker, "__init__", refuse("worker"))
    monkeypatch.setattr(sandbox, "works", refuse("launcher"))
