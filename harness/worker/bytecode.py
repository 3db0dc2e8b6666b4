"""Bytecode for what every worker imports, compiled by the harness where the install carries none.

A worker never writes bytecode: bytecode one worker wrote, the next would run (the reference's
included). Where the installed packages carry none (pip's --no-compile, a container that sets
PYTHONDONTWRITEBYTECODE), every worker therefore compiles torch's Python from source as it boots:
on the 2-core CPU machine `import torch` then took 2.8-3.0 s instead of 1.0 s, and the meta
kernels a reference needs 3.7-4.1 s instead of 0.9 s (on the H200 host, which ships torch so:
2.6-2.7 s and 3.1-3.4 s, against 1.0-1.2 s and 0.7 s).

There the harness keeps bytecode of its own, as a pycache prefix (a tree mirroring the sources'
absolute paths; each file is checked against its source's size and mtime as usual) under
`<cache_home>/harness/bytecode/`. One trusted process writes it: the warmer a run starts, which
imports what a worker boots with and runs no candidate code. Workers read it (read-only under
Landlock); so does the command line's own process, which may add to it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from .launch import LOAD_PACKAGE
from .sandbox import PACKAGE_DIR, private_dir, python_path

# Whether these carry their own bytecode decides whether the harness keeps any: what every worker
# imports, what a reference's meta kernels do, and what a GPU spare imports of Triton.
PACKAGES = ("torch", "pydantic", "sympy", "triton")
# What else the warmer's work depends on: another version of these is warmed again.
STAMPED = ("triton", "harness.worker.child")  # a Triton candidate's import; what a worker imports
# It imports only from the parent's import path (which holds the site directories the parent
# has), set before anything of the harness's dependencies is imported; -S keeps the site
# directories of its own interpreter out, so nothing else is found by chance.
WARMER = LOAD_PACKAGE + """
import json
sys.path[:] = json.loads(sys.argv[2])
from harness.worker.bytecode import warm
warm(json.loads(sys.argv[3]), sys.argv[4])
"""


def bytecode_dir(cache_home: str) -> Path | None:
    """Where workers read bytecode from (made if missing); None where the packages they import
    carry their own, or where no private, writable directory of this user's can be had there."""
    if all(_has_own_bytecode(name) for name in PACKAGES):
        return None
    directory = Path(cache_home) / "harness" / "bytecode"
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        private_dir(str(directory))  # not a link (Landlock would follow it), ours, written by no one else
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(f"{directory} cannot be written")
    except OSError:  # compiled from source, as without one
        return None
    return directory


def read_bytecode_here(cache_home: str) -> None:
    """This process reads the harness's bytecode too, where it keeps any (the command line, before
    it imports torch), and writes there what it compiles unless its interpreter may not."""
    directory = bytecode_dir(cache_home)
    if directory is not None:
        sys.pycache_prefix = str(directory)


def _has_own_bytecode(package: str) -> bool:
    """Whether the installed package has bytecode beside its source, where Python looks without a
    prefix (a package that is not installed needs none)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return True
    source = Path(spec.origin)
    return (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").exists()


def stamp_path(directory: Path) -> Path:
    """The warmer's mark that it finished for these packages as installed now, and for what the
    worker's code imports: another install (an upgrade, another interpreter) or another harness
    is warmed again."""
    installed = []
    for name in (*PACKAGES, *STAMPED):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            installed.append((spec.origin, os.stat(spec.origin).st_mtime_ns))
    key = hashlib.sha256(json.dumps([sys.version, sys.executable, installed]).encode()).hexdigest()[:16]
    return directory / f"warmed-{key}"


def start_warming(directory: Path, env: dict[str, str], cpus: list[int] | None) -> subprocess.Popen | None:
    """Start the warmer, unless it already finished for this install: a head start for the workers
    booting beside it, which read what it has written so far. It carries the run's environment, so
    a CPU run freezes it while timing and the run's end kills it if it is still at work. What it
    says goes to `warmer.log` there (a warmer that fails costs speed only, and says why there)."""
    stamp = stamp_path(directory)
    if stamp.exists():
        return None
    try:
        with open(directory / "warmer.log", "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-I", "-S", "-X", f"pycache_prefix={directory}", "-c", WARMER, PACKAGE_DIR,
                 json.dumps(python_path()), json.dumps(cpus or []), str(stamp)],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError:  # no head start: the workers compile what they import, as without one
        return None


def warm(cpus: list[int], stamp: str) -> None:
    """In the warmer: import what a worker imports as it boots, as it loads a reference and at a
    Triton kernel's first launch, on the cores it was given, then mark this install warmed."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    from . import child

    child.boot_imports()
    child.warm_ahead(lambda: False)  # Triton's modules too, where it is installed
    Path(stamp).touch()
