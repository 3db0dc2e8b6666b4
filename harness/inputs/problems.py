"""Discover reference problems (KernelBench format) and load them.

A problem is one Python file with `Model`, `get_inputs()`, `get_init_inputs()` and module-level
size constants. Two layouts are accepted: our `problems/<id>.py`, and a KernelBench level folder
as it is (`levelN/{number}_{Name}.py`). Discovery never imports a problem; loading does, and only
the worker and tests load them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import re
import types
from pathlib import Path

from ..records import Candidate, Problem

KERNELBENCH_FILE = re.compile(r"^(\d+)_\w+$")
LEVEL_DIR = re.compile(r"^level(\d+)$")
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class ProblemError(Exception):
    """A problems directory or file that cannot be used; the message says why."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _float_constant(tree: ast.Module, name: str) -> float | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)):
                return float(node.value.value)
    return None


def _describe(path: Path, level: int | None) -> Problem:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: cannot be read ({exc})") from None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProblemError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:  # NUL bytes
        raise ProblemError(f"{path}: not valid Python ({exc})") from None
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in REQUIRED_NAMES if n not in defined]
    if missing:
        raise ProblemError(f"{path}: not a KernelBench problem, missing {', '.join(missing)}")
    match = KERNELBENCH_FILE.match(path.stem)
    return Problem(
        id=path.stem,
        path=str(path.resolve()),
        source_hash=sha256_text(source),
        source=source,
        kernelbench_level=level,
        kernelbench_number=int(match.group(1)) if match else None,
        atol=_float_constant(tree, "ATOL"),
        rtol=_float_constant(tree, "RTOL"),
    )


def directory_level(directory: Path) -> int | None:
    """N for a KernelBench levelN folder, else None."""
    match = LEVEL_DIR.match(directory.resolve().name)
    return int(match.group(1)) if match else None


def discover_problems(root: Path) -> list[Problem]:
    """All problems under `root`: its own *.py files, plus those of any levelN subfolders. The
    first unusable file is an error (see discover_problem_files to go on without it)."""
    problems, unusable = discover_problem_files(root)
    if unusable:
        raise ProblemError(next(iter(unusable.values())))
    return problems


def discover_problem_files(root: Path) -> tuple[list[Problem], dict[str, str]]:
    """The usable problems under `root`, and the unusable files as {problem id: why}: one broken
    file leaves the others to be evaluated."""
    if not root.is_dir():
        raise ProblemError(f"problems directory {root} " + ("is a file, not a directory" if root.exists() else "does not exist"))
    dirs = [root] + sorted(d for d in root.iterdir() if d.is_dir() and LEVEL_DIR.match(d.name))
    problems: dict[str, Problem] = {}
    unusable: dict[str, str] = {}
    for directory in dirs:
        level = directory_level(directory)
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            try:
                problem = _describe(path, level)
            except ProblemError as exc:
                unusable[path.stem] = str(exc)
                continue
            if problem.id in problems:
                raise ProblemError(f"two problems share the id {problem.id}: {problems[problem.id].path} and {path}")
            problems[problem.id] = problem
    if not problems and not unusable:
        raise ProblemError(f"no problem files (*.py with Model, get_inputs, get_init_inputs) in {root}")
    return list(problems.values()), unusable


def without_problem(candidates: list[Candidate], unusable: dict[str, str]) -> list[Candidate]:
    """Candidates filed under an unusable problem are not run and say why (skipped, with a reason
    naming the problem file), instead of a run stopped by one broken file."""
    return [c.model_copy(update={"problem_id": folder, "code": None, "code_hash": None,
                                 "problem_unusable": unusable[folder]})
            if c.problem_id is None and (folder := c.rel_path.split("/")[0]) in unusable else c
            for c in candidates]


def load_module(path: str | Path, name: str) -> types.ModuleType:
    """Import a Python file as a fresh module (not registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def input_size_names(module: types.ModuleType) -> list[str]:
    """Integer module constants that only `get_inputs` reads: the sizes that can change
    without changing the model's constructor arguments (and so its parameters)."""
    read_by_inputs = set(module.get_inputs.__code__.co_names)
    read_by_init = set(module.get_init_inputs.__code__.co_names)
    return sorted(
        name
        for name in read_by_inputs - read_by_init
        if type(getattr(module, name, None)) is int
    )


def shrink_input_sizes(module: types.ModuleType, factor: int = 16, floor: int = 8) -> dict[str, int]:
    """Scale the input-only size constants down in place (for quick CPU runs); returns the new values."""
    new_sizes = {}
    for name in input_size_names(module):
        value = getattr(module, name)
        new_sizes[name] = max(min(value, floor), value // factor)
        setattr(module, name, new_sizes[name])
    return new_sizes


LARGER_COPIES = 6  # a larger-size trial holds inputs and outputs about this many times over (both sides, copies)


def alternative_sizes(module: types.ModuleType, device: str) -> list[dict[str, int]]:
    """Other values for the input-only size constants a candidate is checked at: about half, and
    odd (a kernel correct only at the benchmark's shape, or that assumes a multiple of its block
    size, fails there); and, where memory allows, half again as large in the first size get_inputs
    reads (a kernel that hard-codes the official element count computes only part of the output)."""
    names = input_size_names(module)
    smaller = {name: getattr(module, name) // 2 + 1 for name in names if getattr(module, name) > 2}
    order = [name for name in module.get_inputs.__code__.co_names if name in names]
    larger = {order[0]: getattr(module, order[0]) * 3 // 2 + 1} if order else {}
    return [sizes for sizes in (smaller, larger) if sizes and (sizes is smaller or _fits(module, sizes, device))]


def _fits(module: types.ModuleType, sizes: dict[str, int], device: str) -> bool:
    """Whether a trial at `sizes` fits in the memory free now, judged from the shapes the model
    gives on the meta device (no memory used); False when the model cannot run there."""
    import torch

    saved = {name: getattr(module, name) for name in sizes}
    try:
        for name, value in sizes.items():
            setattr(module, name, value)
        with torch.device("meta"), torch.no_grad():
            inputs = list(module.get_inputs())
            model = module.Model(*module.get_init_inputs())
            outputs = model(*inputs)
        tensors = [t for t in [*inputs, *(outputs if isinstance(outputs, (tuple, list)) else [outputs])]
                   if isinstance(t, torch.Tensor)]
        needed = LARGER_COPIES * sum(t.nbytes for t in tensors)
    except Exception:  # a problem that makes its inputs through numpy, an operator with no meta kernel
        return False
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
    if device == "cuda":
        free = torch.cuda.mem_get_info()[0]
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return needed <= free // 2
