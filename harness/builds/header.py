"""torch/extension.h, precompiled once per toolchain for every C++ CPU build.

Every load_inline main.cpp begins with `#include <torch/extension.h>`, and parsing that header is
most of a CPU extension's compile: on a 2-core box the relu candidate's main.cpp took 83 s, and
13 to 21 s with the header precompiled. The harness makes the header itself, never a worker (a
header a candidate could write would be compiled into every later build), under
`<cache_home>/harness/headers/<digest>/`: a copy of extension.h with `extension.h.gch/` beside it,
one directory per flag variant, made when the first build that asks for it needs it (a 2-core
run of -O3 candidates then spends one core, not two, on headers for its first minute). A build
worker gets the directory of its candidate's variant as CPATH, which g++ searches before torch's
-isystem directories, and may read it.

GCC takes a .gch only when it was made with the compile's own flags (it checks, and otherwise
reads the plain copy of the header), so a candidate with other flags, one whose flags were read
wrongly from its code, or a compiler that is not GCC, compiles exactly as before: never another
binary, at worst no faster. The flags are those torch's own ninja writer gives main.cpp, less the
extension's name, which the header never reads. Only the variants below are ever made: a
candidate's own flags never reach a compile the harness runs unconfined.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import inspect
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..worker.pace import Pace

# The flags load_inline calls give main.cpp most often: none and -O3. Each variant is a ~0.8 GB
# file and about 35-65 s of one core to make.
VARIANTS = {"plain": [], "O3": ["-O3"]}
READY, FAILED, LOCK = "ready", "failed", ".lock"
HEADER = Path("torch") / "extension.h"
PROBE_NAME = "harness_header_probe"
MAKE_TIMEOUT_S = 900


def variant_for(code: str) -> str | None:
    """The variant a C++ candidate's load_inline calls compile with, read from its code (never run):
    every `extra_cflags=` a literal list equal to one variant's flags, or none at all ("plain");
    None for anything else (no header: it compiles as it would without one)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    given = [keyword.value for node in ast.walk(tree) if isinstance(node, ast.Call)
             for keyword in node.keywords if keyword.arg == "extra_cflags"]
    try:
        flags = {tuple(ast.literal_eval(value)) for value in given} or {()}
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    names = [name for name, variant in VARIANTS.items() if {tuple(variant)} == flags]
    return names[0] if names else None


def header_root(cache_home: str) -> Path:
    return Path(cache_home) / "harness" / "headers"


def torch_compile(extra_cflags: list[str]) -> tuple[list[str], list[str]] | None:
    """(compiler, flags) that torch's load_inline compiles a CPU main.cpp with, as its own ninja
    writer writes them (a private function: on a torch where it differs, None and no header)."""
    from torch.utils import cpp_extension

    writer = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if writer is None:
        return None
    with tempfile.TemporaryDirectory(prefix="harness-header-") as probe:
        source = Path(probe) / "main.cpp"
        arguments = dict(path=str(Path(probe) / "build.ninja"), name=PROBE_NAME, sources=[str(source)],
                         extra_cflags=list(extra_cflags), extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[],
                         extra_include_paths=[], with_cuda=False, with_sycl=False, is_standalone=False)
        try:
            writer(**{name: value for name, value in arguments.items() if name in inspect.signature(writer).parameters})
            lines = Path(probe, "build.ninja").read_text().splitlines()
        except (TypeError, ValueError, OSError, RuntimeError):
            return None
    found = {key.strip(): value.strip() for key, _, value in (line.partition("=") for line in lines)
             if key.strip() in ("cxx", "cflags")}
    if not found.get("cxx") or "cflags" not in found:
        return None
    flags = [flag for flag in shlex.split(found["cflags"]) if not flag.startswith("-DTORCH_EXTENSION_NAME=")]
    return shlex.split(found["cxx"]), flags


def _is_gcc(compiler: list[str], env: dict[str, str]) -> str | None:
    """The compiler's version text when it is GCC (whose .gch files are found beside a header)."""
    try:
        done = subprocess.run([*compiler, "-v"], capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stderr if "gcc version" in done.stderr else None


def _torch_header() -> Path:
    from torch.utils import cpp_extension

    return Path(cpp_extension.include_paths("cpu")[0]) / HEADER


class PrecompiledHeader:
    """One cache of precompiled torch headers (`header_root`), shared by runs and their threads:
    the first build that needs the header makes it while the others wait (an flock, which the
    kernel releases if its holder dies)."""

    def __init__(self, root: Path):
        self.root = root

    def ready(self, env: dict[str, str], pace: Pace, variant: str) -> Path | None:
        """The directory to put first on a build worker's CPATH for a candidate compiled with
        `variant`'s flags, made if need be; None when this toolchain cannot have one (not GCC,
        torch's flags unknown, the compiler failed on it)."""
        plan = self._plan(env, variant)
        if plan is None:
            return None
        digest, compiler, flags = plan
        made = self.root / digest
        if (made / READY).exists():
            return made
        self.root.mkdir(parents=True, exist_ok=True)
        with _locked(self.root / f"{digest}{LOCK}"):
            if (made / READY).exists():
                return made
            if (self.root / f"{digest}.{FAILED}").exists():
                return None
            return self._make(made, compiler, {variant: flags}, env, pace)

    def _plan(self, env: dict[str, str], variant: str) -> tuple[str, list[str], list[str]] | None:
        """(digest, compiler, the variant's flags): the digest covers all that shapes the header."""
        found = torch_compile(VARIANTS[variant])
        if found is None:
            return None
        compiler, flags = found
        version = _is_gcc(compiler, env)
        if version is None:
            return None
        header = _torch_header()
        payload = repr((compiler, version, variant, flags, str(header), header.read_bytes()))
        return hashlib.sha256(payload.encode()).hexdigest()[:24], compiler, flags

    def _make(self, made: Path, compiler: list[str], variants: dict[str, list[str]], env: dict[str, str],
              pace: Pace) -> Path | None:
        """Compile the variants beside a copy of the header, then move the whole directory into
        place: a reader sees no header or a complete one."""
        partial = Path(tempfile.mkdtemp(prefix=f".{made.name}.", dir=self.root))
        try:
            copy = partial / HEADER
            copy.parent.mkdir(parents=True)
            shutil.copyfile(_torch_header(), copy)
            (copy.parent / f"{HEADER.name}.gch").mkdir()
            compilers = []
            for name, flags in variants.items():
                target = copy.parent / f"{HEADER.name}.gch" / f"{name}.gch"
                with pace.launching():  # a CPU run freezes it while it times, and a stop kills it (the run's marker)
                    compilers.append(subprocess.Popen([*compiler, "-x", "c++-header", *flags, str(_torch_header()),
                                                       "-o", str(target)], env=env, stdin=subprocess.DEVNULL,
                                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            errors = [_finish(process) for process in compilers]
            if any(error is not None for error in errors):
                if all(process.returncode >= 0 for process in compilers):  # it failed, nobody killed it: for good
                    (self.root / f"{made.name}.{FAILED}").write_text("\n".join(e for e in errors if e))
                return None
            (partial / READY).write_text("")
            os.rename(partial, made)
            return made
        finally:
            shutil.rmtree(partial, ignore_errors=True)


def _finish(process: subprocess.Popen) -> str | None:
    """Wait for one compile: None when it made its header, else the end of what it said."""
    try:
        _, stderr = process.communicate(timeout=MAKE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return "timed out"
    return None if process.returncode == 0 else stderr.decode("utf-8", "replace")[-4000:] or f"exit {process.returncode}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
