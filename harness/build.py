"""Builds: where each candidate's extensions are compiled, and how a failed build is told apart
and summarised. The compile itself runs inside the worker (load_inline compiles at import)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

# gcc/clang "file.cpp:12:5: error: ...", nvcc "file.cu(45): error: ...", plain "error: ...".
COMPILER_ERROR = re.compile(r"(?:^|[\s:)])(?:fatal )?error\b\s*(?:\w+\s*)?:", re.IGNORECASE)
LOCATED = re.compile(r"[\w./-]+(?::\d+(?::\d+)?|\(\d+\)):")
NOISE = re.compile(r"ninja: build stopped|collect2: error|Error building extension|error: command|"
                   r"subprocess\.CalledProcessError|RuntimeError: Error", re.IGNORECASE)
BUILD_FAILURE = re.compile(r"Error (building|compiling objects for) extension")
UNDEFINED_REFERENCE = re.compile(r"undefined reference to")
MAX_LINE = 300


def default_build_root() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "harness" / "extensions"


def extensions_dir(build_root: Path, code_hash: str) -> Path:
    """One directory per candidate code and torch version: candidates that reuse an extension
    name (seeds 000, 001 and 004 all call theirs conv2d_cuda) never load each other's builds."""
    return build_root / f"torch-{torch.__version__}" / code_hash[:24]


def is_build_failure(exc_type: str, message: str) -> bool:
    return exc_type == "RuntimeError" and BUILD_FAILURE.search(message) is not None


def _shorten(line: str) -> str:
    line = re.sub(r"/\S*/(?=[\w.-]+(?::\d|\(\d))", "", line.strip())  # build paths to base names
    return line[:MAX_LINE]


def compiler_errors(log: str, limit: int = 8) -> list[str]:
    """The compiler's error lines in order: those in the candidate's own sources first, then
    those in headers (often a consequence, e.g. of a too-old -std), then unlocated ones."""
    lines = [line for line in log.splitlines() if not NOISE.search(line)]
    errors = [line for line in lines if COMPILER_ERROR.search(line) or UNDEFINED_REFERENCE.search(line)]
    located = [line for line in errors if LOCATED.search(line)]
    own = [line for line in located if "/include/" not in line.split(":")[0]]
    ordered = own + [line for line in located if line not in own] + [line for line in errors if line not in located]
    seen: list[str] = []
    for line in ordered:
        short = _shorten(line)
        if short not in seen:
            seen.append(short)
    return seen[:limit]
