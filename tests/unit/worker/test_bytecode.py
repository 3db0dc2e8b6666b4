"""The harness's own bytecode (worker/bytecode.py): kept only where the installed packages carry
none, written by the warmer once per install, never by a worker (tests/e2e/test_bytecode.py)."""

import importlib.util
import os
import py_compile
import sys
from pathlib import Path

from harness.worker import bytecode


def fake_package(root: Path, name: str) -> Path:
    source = root / name / "__init__.py"
    source.parent.mkdir(parents=True)
    source.write_text("VALUE = 1\n")
    return source


def test_kept_only_where_an_installed_package_has_no_bytecode_of_its_own(tmp_path, monkeypatch):
    source = fake_package(tmp_path / "site", "compiled_elsewhere")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(bytecode, "PACKAGES", ("compiled_elsewhere", "not_installed_anywhere"))
    kept = bytecode.bytecode_dir(str(tmp_path / "cache"))
    assert kept == tmp_path / "cache" / "harness" / "bytecode" and kept.is_dir()
    assert kept.stat().st_mode & 0o777 == 0o700
    py_compile.compile(str(source), cfile=str(source.parent / "__pycache__" /
                                              f"__init__.{sys.implementation.cache_tag}.pyc"))
    assert bytecode.bytecode_dir(str(tmp_path / "other_cache")) is None
    assert not (tmp_path / "other_cache").exists()


def test_a_cache_home_that_cannot_be_written_keeps_none(tmp_path, monkeypatch):
    fake_package(tmp_path / "site", "uncompiled")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(bytecode, "PACKAGES", ("uncompiled",))
    (tmp_path / "file").write_text("not a directory")
    assert bytecode.bytecode_dir(str(tmp_path / "file")) is None


def test_the_warmer_compiles_what_a_worker_imports_once_per_install(tmp_path):
    kept = tmp_path / "bytecode"
    kept.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin")}
    warmer = bytecode.start_warming(kept, env, None)
    assert warmer is not None and warmer.wait(timeout=600) == 0, (kept / "warmer.log").read_text()
    assert bytecode.stamp_path(kept).exists()
    tag = sys.implementation.cache_tag
    # What every worker imports, and what a reference's meta kernels and FLOP counter do.
    for module in ("torch", "torch.utils.flop_counter", "sympy"):
        source = Path(importlib.util.find_spec(module).origin).resolve()
        mirrored = Path(f"{kept}{source.parent}") / f"{source.stem}.{tag}.pyc"
        assert mirrored.is_file(), mirrored
    assert bytecode.start_warming(kept, env, None) is None  # warmed: not again for this install
