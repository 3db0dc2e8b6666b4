"""The precompiled torch header: made once per toolchain and flag variant by the harness, only
for the variants candidates ask for, shared by runs and threads, found by g++ for torch's own
compile flags, and skipped where it cannot help."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.builds.header import FAILED, HEADER, PrecompiledHeader, header_root, torch_compile, variant_for
from harness.worker.pace import REAL_TIME

FAKE_GCC = """#!/bin/sh
# Says it is GCC; "compiles" a header by writing its -o target, and counts each compile.
case "$1" in -v) echo "gcc version 12.2.0 (fake)" >&2; exit 0;; esac
echo compile >> "{calls}"
{fail}
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && printf pch > "$2"; shift; done
"""


def fake_compiler(tmp_path, monkeypatch, *, fail: bool = False, version: str | None = None) -> Path:
    calls = tmp_path / "calls"
    script = tmp_path / "fake-c++"
    text = FAKE_GCC.format(calls=calls, fail="echo 'fatal error: broken' >&2; exit 1" if fail else "")
    if version:
        text = text.replace("gcc version 12.2.0 (fake)", version)
    script.write_text(text)
    script.chmod(0o755)
    monkeypatch.setenv("CXX", str(script))  # torch's ninja writer names the compiler from CXX
    return calls


def compiles(calls) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def test_torch_flags_are_main_cpps_less_the_extension_name():
    compiler, plain = torch_compile([])
    _, optimized = torch_compile(["-O3"])
    assert compiler and "-fPIC" in plain and any(flag.startswith("-std=") for flag in plain)
    assert "-DTORCH_API_INCLUDE_EXTENSION_H" in plain and not any("TORCH_EXTENSION_NAME" in f for f in plain)
    assert optimized == plain + ["-O3"]


def test_made_once_per_variant_asked_for_beside_a_copy_of_the_header(tmp_path, monkeypatch):
    calls = fake_compiler(tmp_path, monkeypatch)
    headers = PrecompiledHeader(header_root(str(tmp_path / "cache")))
    made = headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "O3")
    assert made is not None and (made / HEADER).is_file()
    assert [p.name for p in (made / f"{HEADER}.gch").iterdir()] == ["O3.gch"]  # only what was asked for
    assert headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "O3") == made and compiles(calls) == 1
    plain = headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "plain")
    assert plain != made and [p.name for p in (plain / f"{HEADER}.gch").iterdir()] == ["plain.gch"]
    assert compiles(calls) == 2
    assert [p.name for p in made.parent.iterdir() if p.name.startswith(".")] == []  # no partial dir left


@pytest.mark.parametrize("code, variant", [
    ('load_inline(name="a", cpp_sources=s, functions=["f"])', "plain"),
    ('load_inline(name="a", cpp_sources=s, functions=["f"], extra_cflags=["-O3"])', "O3"),
    ('a = load_inline(extra_cflags=["-O3"])\nb = load_inline(extra_cflags=("-O3",))', "O3"),
    ('load_inline(name="a", extra_cflags=["-O3", "-march=native"])', None),  # no such variant: none
    ('a = load_inline(extra_cflags=["-O3"])\nb = load_inline(extra_cflags=[])', None),  # two variants
    ('load_inline(name="a", extra_cflags=FLAGS)', None),  # not a literal: not guessed
    ("def broken(:\n", None),
])
def test_the_variant_is_read_from_the_candidates_load_inline_calls(code, variant):
    assert variant_for(code) == variant


def test_threads_that_need_it_at_once_make_it_once(tmp_path, monkeypatch):
    calls = fake_compiler(tmp_path, monkeypatch)
    headers = PrecompiledHeader(tmp_path / "headers")
    found = []
    threads = [threading.Thread(target=lambda: found.append(headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "O3")))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1 and None not in found and compiles(calls) == 1


def test_a_compiler_that_fails_on_it_is_not_asked_again(tmp_path, monkeypatch):
    calls = fake_compiler(tmp_path, monkeypatch, fail=True)
    headers = PrecompiledHeader(tmp_path / "headers")
    assert headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "plain") is None
    tried = compiles(calls)
    assert headers.ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "plain") is None and compiles(calls) == tried
    [failed] = (tmp_path / "headers").glob(f"*.{FAILED}")
    assert "fatal error: broken" in failed.read_text()
    assert not [p for p in (tmp_path / "headers").iterdir() if p.is_dir()]


def test_no_header_for_a_compiler_that_is_not_gcc(tmp_path, monkeypatch):
    calls = fake_compiler(tmp_path, monkeypatch, version="clang version 17.0.0")
    assert PrecompiledHeader(tmp_path / "headers").ready({"PATH": "/usr/bin:/bin"}, REAL_TIME, "plain") is None
    assert compiles(calls) == 0
