"""The precompiled torch header: made once per toolchain and flag variant by the harness, only
for the variants candidates ask for, shared by runs and threads, found by g++ for torch's own
compile flags, and skipped where it cannot help."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.builds.header import HEADER, PrecompiledHeader, header_root, torch_compile
from harness.worker.pace import REAL_TIME


@pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")
def test_gcc_takes_it_for_torchs_own_flags_whatever_the_extension_name(tmp_path, monkeypatch, cache_home):
    """The real thing (the session's header, which its C++ builds share): g++ reports the .gch it
    used (-H prints '!' before it) for a main.cpp compiled as load_inline compiles one, for
    another extension name than the probe's."""
    monkeypatch.delenv("CXX", raising=False)
    made = PrecompiledHeader(header_root(str(cache_home))).ready(
        {"PATH": "/usr/local/bin:/usr/bin:/bin"}, REAL_TIME, "O3")
    if made is None:
        pytest.skip("the compiler here is not GCC")
    compiler, flags = torch_compile(["-O3"])
    source = tmp_path / "main.cpp"
    source.write_text("#include <torch/extension.h>\nint answer() { return 42; }\n")
    done = subprocess.run([*compiler, "-DTORCH_EXTENSION_NAME=some_candidate", *flags, "-H", "-Winvalid-pch",
                           "-fsyntax-only", str(source)], capture_output=True, text=True,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "CPATH": str(made)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"! {made / HEADER}.gch/O3.gch" in done.stderr
