"""`harness check`: find reference problems a trivial candidate could pass. Known weak spot of
loose tolerances: all-zeros passes softmax over many classes, some norms and min-reductions.
Only the problems' own reference workers run here; no candidate is involved."""

from __future__ import annotations

import sys

import torch
from pydantic import BaseModel
from tqdm import tqdm

from .builds.cache import BuildCache, default_build_root, toolchain
from .judge.degenerate import degenerate_flags
from .judge.reference import ReferenceFailed, ReferenceRunner
from .records import EvalConfig, HostEnv, Problem
from .schedule.devices import device_for
from .worker.bytecode import bytecode_dir
from .worker.parent import Placement
from .worker.sandbox import SandboxPolicy

CHECK_SEEDS = (11, 12, 13)


class ProblemCheck(BaseModel):
    problem: str
    flags: list[str]
    notes: list[str]
    error: str | None = None


def check_problem(problem: Problem, config: EvalConfig, cache: BuildCache, placement: Placement,
                  shrink: bool) -> ProblemCheck:
    runner = ReferenceRunner(problem, config, device_for(config.device), cache.key_dir(problem.source_hash), placement,
                             shrink=shrink)
    try:
        runner.load()
        outputs = []
        for seed in (*CHECK_SEEDS, CHECK_SEEDS[0]):  # the first seed twice: is it deterministic?
            with runner.expected(seed) as (expected, _):
                outputs.append([t.clone() for t in expected])
    except ReferenceFailed as failed:
        return ProblemCheck(problem=problem.id, flags=["reference_failed"], notes=[], error=str(failed))
    finally:
        runner.close()
    tolerance = config.tolerance_for(problem)
    unstable, unstable_notes = unstable_flags(outputs[0], outputs[-1], tolerance.atol, tolerance.rtol)
    flags, notes = degenerate_flags(outputs[:-1], tolerance.atol, tolerance.rtol)
    return ProblemCheck(problem=problem.id, flags=unstable + flags, notes=unstable_notes + notes)


def unstable_flags(first: list[torch.Tensor], again: list[torch.Tensor], atol: float,
                   rtol: float) -> tuple[list[str], list[str]]:
    """Outputs no candidate can be held to: NaN or Inf, or different for the same inputs."""
    flags, notes = [], []
    if not all(bool(torch.isfinite(t).all()) for t in first if t.is_floating_point() or t.is_complex()):
        flags.append("non_finite")
        notes.append("an output holds NaN or Inf")
    if not all(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True) for a, b in zip(first, again)):
        flags.append("non_deterministic")
        notes.append("the same inputs gave outputs that differ beyond the tolerance")
    return flags, notes


def check_setup(config: EvalConfig, host: HostEnv, sandbox: SandboxPolicy) -> tuple[BuildCache, Placement]:
    """Where checks keep their reference workers' files, and how those workers are placed."""
    gpus = [torch.cuda.current_device()] if config.device == "cuda" else []
    cache = BuildCache(default_build_root(host), toolchain(config.device, gpus, host, sandbox.namespaces))
    return cache, Placement(env=dict(host.passed), sandbox=sandbox, bytecode=bytecode_dir(host.cache_home))


def check_problems(problems: list[Problem], config: EvalConfig, host: HostEnv, sandbox: SandboxPolicy,
                   shrink: bool) -> list[ProblemCheck]:
    cache, placement = check_setup(config, host, sandbox)
    return [check_problem(problem, config, cache, placement, shrink)
            for problem in tqdm(problems, unit="problem", desc="check", file=sys.stderr)]


def describe_findings(findings: list[ProblemCheck]) -> str:
    return "\n".join(f"{f.problem:32s} {', '.join(f.flags) or 'ok':40s} {f.error or '; '.join(f.notes)}"
                     for f in findings)
