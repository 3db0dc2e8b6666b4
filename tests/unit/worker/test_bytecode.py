"""The harness's own bytecode (worker/bytecode.py): kept only where the installed packages carry
none, in a private directory of this user's, and warmed again when what it holds goes stale.
The warmer itself and the workers reading it: tests/e2e/test_bytecode.py."""

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


def uncompiled_packages(tmp_path, monkeypatch, *names: str) -> None:
    for name in names:
        fake_package(tmp_path / "site", name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(bytecode, "PACKAGES", names)


def test_kept_only_where_an_installed_package_has_no_bytecode_of_its_own(tmp_path, monkeypatch):
    uncompiled_packages(tmp_path, monkeypatch, "compiled_elsewhere")
    monkeypatch.setattr(bytecode, "PACKAGES", ("compiled_elsewhere", "not_installed_anywhere"))
    kept = bytecode.bytecode_dir(str(tmp_path / "cache"))
    assert kept == tmp_path / "cache" / "harness" / "bytecode" and kept.is_dir()
    assert kept.stat().st_mode & 0o777 == 0o700
    source = tmp_path / "site" / "compiled_elsewhere" / "__init__.py"
    py_compile.compile(str(source), cfile=str(source.parent / "__pycache__" /
                                              f"__init__.{sys.implementation.cache_tag}.pyc"))
    assert bytecode.bytecode_dir(str(tmp_path / "other_cache")) is None
    assert not (tmp_path / "other_cache").exists()


def test_none_is_kept_where_the_directory_is_not_a_private_one_of_this_users(tmp_path, monkeypatch):
    """A link (Landlock would grant reading wherever it leads), a directory others may write, a
    cache home that is not a directory: the workers compile what they import, as without one."""
    uncompiled_packages(tmp_path, monkeypatch, "uncompiled")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked" / "harness").mkdir(parents=True)
    (tmp_path / "linked" / "harness" / "bytecode").symlink_to(elsewhere)
    assert bytecode.bytecode_dir(str(tmp_path / "linked")) is None
    (tmp_path / "shared" / "harness" / "bytecode").mkdir(parents=True)
    (tmp_path / "shared" / "harness" / "bytecode").chmod(0o777)
    assert bytecode.bytecode_dir(str(tmp_path / "shared")) is None
    (tmp_path / "file").write_text("not a directory")
    assert bytecode.bytecode_dir(str(tmp_path / "file")) is None


def test_a_warmer_that_cannot_start_costs_only_its_head_start(tmp_path):
    assert bytecode.start_warming(tmp_path / "gone", {"PATH": "/usr/bin"}, None) is None


def test_the_stamp_changes_with_what_the_warmer_compiled(tmp_path, monkeypatch):
    """Another version of a package it warmed, or of the worker's code, is warmed again."""
    uncompiled_packages(tmp_path, monkeypatch, "warmed_package")
    first = bytecode.stamp_path(tmp_path)
    assert bytecode.stamp_path(tmp_path) == first
    source = tmp_path / "site" / "warmed_package" / "__init__.py"
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 1_000_000_000))
    assert bytecode.stamp_path(tmp_path) != first
