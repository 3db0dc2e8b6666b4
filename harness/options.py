"""The caller's choices, checked at the edge: command-line values (and the API's keywords) turned
into the records a run is made of (EvalConfig, RunScale, RunSetup). Every range error names the
option and its bound, before anything is recorded."""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
from pathlib import Path

from typing import TYPE_CHECKING

from pydantic import ValidationError

from .errors import UsageError
from .records import EvalConfig, HostEnv, Limits, SandboxMode

if TYPE_CHECKING:
    from .run import RunSetup
    from .schedule.plan import RunScale

# The argparse types below are needed by every `--help`; what turns the values into a run's
# records imports torch, so it is imported where it is used.

SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class Bytes(int):
    """A byte count that reads as one (`--help`'s defaults): 11.8G, not 12638091264."""

    def __str__(self) -> str:
        for unit in "TGMK":
            if self >= SIZE_UNITS[unit.lower()]:
                return f"{self / SIZE_UNITS[unit.lower()]:.3g}{unit}"
        return f"{int(self)}"


def statuses(text: str) -> frozenset[str]:
    """Verdicts by name, comma-separated (ok,mismatch)."""
    from .records import Status

    named = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = named - {status.value for status in Status}
    if not named or unknown:
        raise argparse.ArgumentTypeError(f"expected verdicts among {', '.join(s.value for s in Status)}, not {text!r}")
    return named


def size(text: str) -> int:
    """A byte count: 512M, 8G, 1T or plain bytes."""
    number, unit = text.strip().rstrip("bB"), ""
    if number and number[-1].lower() in SIZE_UNITS:
        number, unit = number[:-1], number[-1].lower()
    try:
        value = int(float(number) * SIZE_UNITS[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 8G, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text!r}")
    return value


def number(kind: type, low: float, *, above: bool = False):
    """An argparse type: a finite number of this kind, at least `low` (more than it, with `above`).
    argparse names the option in front of the message."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {'whole ' if kind is int else ''}number, not {text!r}") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"must be {'more than' if above else 'at least'} {low:g}, not {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def pattern(text: str) -> re.Pattern:
    """A regular expression (--group-by)."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None


def trials(text: str) -> int | None:
    """--trials: 'auto' (adaptive) or a fixed count of at least 1."""
    return None if text == "auto" else number(int, 1)(text)


def given_config(args: argparse.Namespace, defaults: argparse.Namespace) -> dict[str, object]:
    """The EvalConfig fields `args` sets to other than they are with no options (`defaults`)."""
    mine, usual = eval_config(args).model_dump(), eval_config(defaults).model_dump()
    return {field: value for field, value in mine.items() if value != usual[field]}


def eval_config(args: argparse.Namespace) -> EvalConfig:
    from .run import resolve_device

    try:
        return EvalConfig(device=resolve_device(args.device), precision=args.precision, baseline=args.baseline,
                          correctness_trials=args.correctness_trials, warmup=args.warmup, trials=args.trials,
                          min_trials=args.min_trials, max_trials=max(args.max_trials, args.min_trials),
                          time_budget_s=args.time_budget, timeout_s=args.timeout, build_timeout_s=args.build_timeout,
                          seed=args.seed, strict_shapes=args.strict_shapes, atol=args.atol, rtol=args.rtol,
                          memcheck=args.memcheck)
    except ValidationError as exc:
        raise UsageError(str(exc).splitlines()[-1]) from None


def run_scale(args: argparse.Namespace, config: EvalConfig) -> RunScale:
    import torch

    from .schedule.plan import RunScale

    gpus = None
    if args.gpus is not None:
        if args.backend == "ray":
            raise UsageError("--gpus is for local runs; on Ray each evaluation task gets the GPU Ray assigns it")
        if config.device != "cuda":
            raise UsageError("--gpus needs a CUDA run")
        try:
            gpus = [int(part) for part in args.gpus.split(",") if part.strip()]
        except ValueError:
            raise UsageError(f"--gpus takes GPU indices like 0,2, not {args.gpus!r}") from None
        count = torch.cuda.device_count()
        if not gpus or len(set(gpus)) != len(gpus) or any(not 0 <= g < count for g in gpus):
            raise UsageError(f"--gpus {args.gpus}: this machine has GPUs 0..{count - 1}, each named once")
    if args.backend == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("--backend ray needs Ray: pip install 'harness[ray]'")
    return RunScale(jobs=args.jobs, gpus=gpus, backend=args.backend, ray_address=args.ray_address,
                    warm_workers=args.warm_workers)


def run_setup(args: argparse.Namespace, host: HostEnv, scale: RunScale | None = None) -> RunSetup:
    from .builds.cache import default_build_root
    from .run import RunSetup, prepare_sandbox
    from .schedule.plan import RunScale

    limits = Limits(host_memory=args.max_host_memory, processes=args.max_processes, scratch=args.max_scratch,
                    file_size=args.max_file_size)
    build_root = getattr(args, "build_dir", None) or default_build_root(host)
    return RunSetup(scale=scale or RunScale(), host=host, build_root=Path(build_root),
                    sandbox=prepare_sandbox(SandboxMode(args.sandbox), limits))
