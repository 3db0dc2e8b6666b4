"""The problem's reference worker: loaded once per lane and problem, timed and profiled once (what
it measured then is `measured`, handed forward to every candidate of the problem), then asked for
expected outputs: each correctness trial's (kept, within a memory budget, for every later candidate
of the problem), and each verified timed call's. Trusted code, still confined."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from ..records import EvalConfig, Problem, TimingStats
from ..worker.parent import Placement, Worker, WorkerStopped
from ..worker.protocol import (MAX_BATCH_CALLS, Command, HardwareFloor, ParamDigest, Peaks, Profile, Reply, TensorRef,
                               WorkerJob)
from .degenerate import DegenerateCheck
from .device import Device
from .timing.protocol import Timer, TimingPlan
from .timing.timed import Timed
from .timing.stats import timing_stats

TRIAL_SEED_OFFSET = 1000  # correctness trials' inputs use seeds apart from the init seed
KEPT_SHARE = 0.25  # of the device's memory (or the host's, on a CPU run) for expected outputs kept for reuse
DEGENERATE_CHECK_BYTES = 1 << 28  # trial outputs up to this size are also checked for a degenerate problem
# Reference commands that measure the harness's per-call overhead right before a candidate's
# timing: as many as fit in a few milliseconds of the reference's time, within bounds (a forger
# gains the spread of these, so a quick kernel gets more of them; a quick reference timed in
# batches, at least as many as drift correction needs, see `recalibrate`), after some that are
# not counted.
RECALIBRATION_CALLS = (4, 24)
RECALIBRATION_BUDGET_MS = 20.0
# What the reference's own time is taken from: never the first call (on the CPU too it is the
# slowest, 0.08 against 0.027 ms for a relu), and only from enough calls that an interval below
# the first timing's is no accident (four calls all fall below the median one time in sixteen).
UNTIMED_CALLS, SURELY_FASTER_CALLS = 1, 8
# A reference whose median is this far above its fastest call is timed once more and judged on
# all its calls: slow calls made a median (its speedups' denominator) too slow, never too fast. On
# the 2-core VM three of a relu's five calls faulted in their 256 MB outputs (349 to 366 ms
# against 58 to 79) and its candidate scored 2.84x instead of 0.53x; honest spreads there stay
# under 1.1 (layernorm, bias+GELU, maxpool, sum).
SECOND_LOOK_ABOVE_FASTEST = 1.25


@dataclass(frozen=True)
class Recalibration:
    """Reference calls timed right before a candidate's timing."""

    overhead_ms: list[float]  # per call, what the parent's clock saw beyond the reported time
    commit_ms: list[float]  # per call, the part of it the commit of the outputs took
    timing: TimingStats  # the reference's own time on those calls but the first


def surely_faster(first: TimingStats, now: TimingStats) -> TimingStats | None:
    """`now` when it is surely faster than `first` (their medians' 95% intervals apart, `now` of
    enough calls), else None: what a candidate's speedup is against instead of the reference's
    first timing. A machine drifts between the two by more than a quick kernel's speedup can be
    trusted to (on a shared 2-core machine a 25 µs operator's first timing ranged from 0.022 to
    0.053 ms, and a candidate calling it scored 1.6x). Never the other way: a reference slower
    now, perhaps slowed by what a candidate left running on the GPU, cannot raise a speedup."""
    apart = first.ci_low_ms is not None and now.ci_high_ms < first.ci_low_ms
    return now if apart and now.n >= SURELY_FASTER_CALLS else None


def needs_second_look(samples_ms: list[float]) -> bool:
    """Whether a reference's median sits far enough above its fastest call to be timed once more."""
    return bool(samples_ms) and statistics.median(samples_ms) > SECOND_LOOK_ABOVE_FASTEST * min(samples_ms)


class ReferenceFailed(Exception):
    """The reference itself could not load, run or time; its candidates cannot be judged."""


def trial_seeds(config: EvalConfig) -> list[int]:
    """The correctness trials' seeds, in order (--memcheck's pass makes the same calls on the same
    inputs: a kernel that errs on some calls or some inputs only errs there too)."""
    return [config.seed + TRIAL_SEED_OFFSET + number for number in range(config.correctness_trials)]


def worker_job(role: str, problem: Problem, config: EvalConfig, peaks: Peaks | None = None) -> WorkerJob:
    """Both sides get the same seed, device and precision; only the reference may be timed
    through torch.compile."""
    return WorkerJob(role=role, problem_path="", device=config.device, precision=config.precision,
                     init_seed=config.seed, compile_baseline=role == "reference" and config.baseline == "compile",
                     peaks=peaks)


@dataclass(frozen=True)
class Measured:
    """What the reference measured once, at its start: what every candidate of the problem is
    held to. `timed`: its own timing, call by call; `batch`: calls per timed command in it;
    `batch_cap`: calls one timed command may make (as many as memory and the protocol allow)."""

    params: list[ParamDigest]
    alt_sizes: list[dict[str, int]]
    timing: TimingStats
    timed: Timed
    profile: Profile | None
    batch: int
    batch_cap: int
    floor: HardwareFloor | None = None  # where the device has one (judge/device.py)
    default_math_timing: TimingStats | None = None  # timed again under PyTorch's default math, where the device does


class ReferenceRunner:
    """The problem's reference worker: loaded once, timed once (`start`), asked for expected outputs."""

    def __init__(self, problem: Problem, config: EvalConfig, device: Device, key_dir: Path,
                 placement: Placement = Placement(), shrink: bool = False, peaks: Peaks | None = None,
                 worker: Worker | None = None):
        """`worker`: one booted ahead (a lane's spare), or None to boot one (paced by the device's pace)."""
        self.problem, self.config, self.device = problem, config, device
        self.rng = random.SystemRandom()
        self.worker = worker or Worker(placement, role="reference", device=config.device, timeout_s=config.timeout_s,
                                       key_dir=key_dir, pace=device.pace)
        job = worker_job("reference", problem, config, peaks).model_copy(update={"shrink": shrink})
        self.worker.start(job, None, problem.source, key_dir)
        self.params: list[ParamDigest] = []
        self.alt_sizes: list[dict[str, int]] = []
        self.floor: HardwareFloor | None = None
        self.measured: Measured | None = None  # once started
        self._kept: dict[tuple, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self.memory_bytes = device.memory_bytes(placement.gpu)
        self._kept_bytes, self.memory_budget = 0, int(KEPT_SHARE * self.memory_bytes)
        self._degenerate: DegenerateCheck | None = None
        self._watched: set[int] = set()  # seeds fed to _degenerate
        self._degenerate_notes: list[str] | None = None  # its verdict, once every seed was seen
        self.output_specs: list[tuple[torch.Size, torch.dtype]] = []  # its outputs at the problem's own sizes
        self.output_form: str | None = None  # what its forward returns (None before its first trial)

    def _checked(self, reply_fn, what: str) -> Reply:
        try:
            reply = reply_fn()
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
        if not reply.ok:
            detail = reply.failure.exc_type + ": " + reply.failure.message if reply.failure else reply.rejected
            raise ReferenceFailed(f"reference {what} failed: {detail}"[:300])
        return reply

    def request(self, command: Command, what: str) -> Reply:
        """A command to the reference; its failure is the reference's (ReferenceFailed)."""
        return self._checked(lambda: self.worker.request(command, f"reference {what}"), what)

    @property
    def peaks(self) -> Peaks | None:
        return Peaks(flops_per_ms=self.floor.peak_flops_per_ms, bytes_per_ms=self.floor.peak_bytes_per_ms) \
            if self.floor else None

    def load(self) -> None:
        loaded = self._checked(lambda: self.worker.reply("reference load", self.config.build_timeout_s), "load")
        self.params, self.alt_sizes = loaded.params or [], loaded.alt_sizes or []

    def start(self) -> Measured:
        """Load, measure the hardware floor (where the device has one), time once and profile one
        of the timed calls: what every candidate of the problem is held to."""
        self.load()
        if self.device.hardware_floor:
            self.floor = self.request(Command(op="floor", seed=self.rng.getrandbits(62)), "floor").floor
        batch_cap = self._batch_cap()
        timed, batch = self._time(TimingPlan.of(self.config), profiled=1, own=True, batch=1, cap=batch_cap, size=True)
        if needs_second_look(timed.reported_ms):
            again, _ = self._time(TimingPlan.of(self.config), profiled=0, batch=batch, cap=batch_cap, warm_up=False)
            timed.extend(again)
        self.measured = Measured(
            params=self.params, alt_sizes=self.alt_sizes, floor=self.floor, timed=timed,
            timing=timing_stats(timed.reported_ms, self.device.clock, timed.stopped, timed.batch, timed.others_cores,
                                timed.throttled_ms),
            profile=timed.profiles[0] if timed.profiles else None, batch=batch, batch_cap=batch_cap)
        if self.device.default_math:
            self.measured = dataclasses.replace(self.measured, default_math_timing=self._time_default_math())
        return self.measured

    def _batch_cap(self) -> int:
        """Calls a timed command may make: as many as keep a batch's inputs and outputs within the
        device's share of memory, and no more than MAX_BATCH_CALLS (nor than the device allows a
        reply to describe); one where the outputs' shapes or dtypes change from seed to seed
        (nonzero, unique), which cannot be stacked a row per call nor checked alike. Measured on
        the first two correctness trials, kept (within the memory budget) for the first candidate
        where it makes them, which then need not wait for them."""
        specs, cap = [], MAX_BATCH_CALLS
        for trial in range(2):
            with self.expected(self.config.seed + TRIAL_SEED_OFFSET + trial,
                               keep=trial < self.config.correctness_trials) as (outputs, inputs):
                specs.append([(t.shape, t.dtype) for t in outputs])
                cap = min(cap, self.device.batch_bytes(self.memory_bytes) // max(1, sum(t.nbytes for t in outputs + inputs)))
                if (bound := self.device.batch_cap(len(outputs))) is not None:
                    cap = min(cap, bound)
            if cap <= 1:
                return 1  # the second trial would change nothing
        return cap if specs[0] == specs[1] else 1

    def _time(self, plan: TimingPlan, profiled: int, batch: int, cap: int, own: bool = False, warm_up: bool = True,
              size: bool = False) -> tuple[Timed, int]:
        """Timed calls, `batch` to a command, after a warm-up; with `size`, its batch is sized first,
        after the warm-up (at most `cap`). `own`: its own timing, which its candidates are held to
        (judge/device.py, `reference_measurement`). Returns what was timed and the batch it was timed at."""
        timer = Timer(self.device.reference_measurement(self, own), plan, self.rng, "reference timing", batch=batch,
                      cap=cap)
        if warm_up:
            self._checked(lambda: timer.warm_up(size=size), "warm-up")
        try:
            timed, failed = timer.run(profiled=profiled)
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference timing: {stopped.stop.error}") from None
        if failed is not None:
            self._checked(lambda: failed, "timing")
        return timed, timer.batch

    def _time_default_math(self) -> TimingStats:
        """The reference's time under PyTorch's default math flags (TF32 in cuDNN): what a user
        running PyTorch as shipped sees. Its outputs are never used as expected ones."""
        self.request(Command(op="math", default_math=True), "math flags")
        timed, _ = self._time(TimingPlan.of(self.config), profiled=0, batch=self.measured.batch,
                              cap=self.measured.batch_cap)
        self.request(Command(op="math", default_math=False), "math flags")
        return timing_stats(timed.reported_ms, self.device.clock, timed.stopped, others_cores=timed.others_cores,
                            throttled_ms=timed.throttled_ms)

    def recalibrate(self, batch: int) -> Recalibration:
        """The harness's per-call overhead and the reference's own time as measured right now,
        with the machine's current load: a few reference commands timed the way a candidate's
        are, `batch` calls each (the candidate's: a command's overhead is shared by its calls).
        A reference quick enough to be timed in batches itself gets as many commands as
        `surely_faster` needs at least: quick problems are the ones whose first timing drifts
        most (a slow one recalibrated at a quick candidate's batch would pay seconds for them).
        Some first commands are not counted where the device says so (`uncounted_commands`)."""
        measured = self.measured
        fewest, most = RECALIBRATION_CALLS
        if batch > 1 and measured.batch > 1:
            fewest = max(fewest, UNTIMED_CALLS + SURELY_FASTER_CALLS)
        commands = max(fewest, min(most, int(RECALIBRATION_BUDGET_MS / max(measured.timing.median_ms * batch, 1e-3))))
        uncounted = self.device.uncounted_commands(measured.timing.median_ms, batch)
        timed, _ = self._time(TimingPlan.of(self.config).model_copy(update={"fixed": uncounted + commands}), profiled=0,
                              batch=batch, cap=measured.batch_cap, warm_up=False)
        # Only these: the reference's own timing ran when the lane was busier (the next worker
        # booting beside it), and an overhead taken then is larger than a candidate's now.
        return Recalibration(overhead_ms=timed.overhead_ms[uncounted:], commit_ms=timed.commit_ms[uncounted:],
                             timing=timing_stats(timed.reported_ms[max(uncounted, UNTIMED_CALLS):], self.device.clock,
                                                 timed.stopped, timed.batch, timed.others_cores, timed.throttled_ms))

    def paired_command(self) -> float:
        """One timed command of its own batch, made now: its time a call (paired with a candidate's
        command just before, timing/protocol.py)."""
        measured, timed = self.measured, Timed()
        timer = Timer(self.device.reference_measurement(self, own=False), TimingPlan.of(self.config), self.rng,
                      "paired reference command", batch=measured.batch, cap=measured.batch_cap)
        self._checked(lambda: timer.command(timed), "paired command")
        return timed.reported_ms[0]

    def profiled_now(self, calls: int) -> Timed:
        """`calls` profiled commands and as many plain ones (of its own batch), after a warm-up,
        made now: what the profiler costs the reference on the machine as it is when a
        candidate's profiled calls came out slow."""
        timed, _ = self._time(TimingPlan.of(self.config).model_copy(update={"fixed": calls}), profiled=calls,
                              batch=self.measured.batch, cap=self.measured.batch_cap)
        return timed

    @contextlib.contextmanager
    def held(self, refs: list[TensorRef], what: str) -> Iterator[list[torch.Tensor]]:
        """Its tensors at `refs`, views of its commit buffer, its worker stopped meanwhile. Only its
        own failure to be read is the reference's, not those inside the block."""
        with contextlib.ExitStack() as reading:
            try:
                tensors = reading.enter_context(self.worker.reading(refs, f"reference {what}", held=True))
            except WorkerStopped as stopped:
                raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
            yield tensors
            del tensors  # no view may outlive the block: its memory is unmapped or reused then

    @contextlib.contextmanager
    def expected(self, seed: int, sizes: dict[str, int] | None = None,
                 keep: bool = False) -> Iterator[tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """The reference's outputs for the inputs of `seed` (at `sizes`), and those inputs as
        forward left them. With `keep`, they are kept (copied out, within the memory budget) for
        every later candidate; otherwise they are read in place, valid inside the block only
        (the reference's worker, idle meanwhile, stopped so that they stay as they are: a copy of
        fresh memory took 0.2 to 0.7 s per 256 MB tensor on the 2-core VM)."""
        key = (seed, tuple(sorted((sizes or {}).items())))
        if key in self._kept:
            yield self._kept[key]
            return
        reply = self.request(Command(op="trial", seed=seed, sizes=sizes), "trial")
        self.output_form = reply.form
        with self.held(reply.outputs + reply.inputs, "trial") as both:
            outputs, inputs = both[:len(reply.outputs)], both[len(reply.outputs):]
            del both
            if not sizes:
                self.output_specs = [(t.shape, t.dtype) for t in outputs]
            size = sum(t.nbytes for t in outputs + inputs)
            if keep and self._kept_bytes + size <= self.memory_budget:
                # Into segments of their own: a clone that splits a larger freed block (a candidate's
                # 8.5 GB timed-output copy, before a smaller other-shapes output is kept) pins the
                # whole block for as long as the problem's candidates run (7.2 GB on an H200).
                self.device.release_cache()
                self._kept[key] = (self._copied(outputs), self._copied(inputs))
                self._kept_bytes += size
                del outputs, inputs
                yield self._kept[key]
            else:
                yield outputs, inputs

    def watch_degenerate(self, seed: int, outputs: list[torch.Tensor]) -> None:
        """Feed a correctness trial's expected outputs (at the problem's own sizes) to the check
        for a degenerate problem, once per seed; the first seed's are copied for it."""
        size = sum(t.nbytes for t in outputs)
        if self._degenerate_notes is not None or seed in self._watched or size > DEGENERATE_CHECK_BYTES:
            return
        if self._degenerate is None:
            if self._kept_bytes + size > self.memory_budget:
                return
            tolerance = self.config.tolerance_for(self.problem)
            self._degenerate = DegenerateCheck(self._copied(outputs), tolerance.atol, tolerance.rtol)
            self._kept_bytes += size  # the copy counts against what the parent keeps until judged
        else:
            self._degenerate.add(outputs)
        self._watched.add(seed)

    def degenerate(self, seeds: list[int]) -> list[str]:
        """What makes the problem trivially passable, once `watch_degenerate` has seen every one
        of `seeds` (at least two); empty when nothing does, or before then (outputs too large to
        check, a candidate that failed before the last trial)."""
        if self._degenerate_notes is None:
            if len(seeds) < 2 or self._degenerate is None or not self._watched.issuperset(seeds):
                return []
            self._degenerate_notes = self._degenerate.flags()[1]
            self._kept_bytes -= sum(t.nbytes for t in self._degenerate.first)
            self._degenerate = None  # and its copy of the first outputs with it
        return self._degenerate_notes

    def _copied(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Copies of tensors read in place, finished before that place goes (a GPU copy still
        running when its mapping closes would read memory that is no longer there)."""
        copies = [t.clone() for t in tensors]
        self.device.synchronize()
        return copies

    @property
    def output_bytes(self) -> int:
        """The bytes of its outputs at the problem's own sizes (0 before its first trial there)."""
        return sum(shape.numel() * dtype.itemsize for shape, dtype in self.output_specs)

    @property
    def output_elements(self) -> int:
        """The elements of its outputs at the problem's own sizes (0 before its first trial there)."""
        return sum(shape.numel() for shape, _ in self.output_specs)

    def output_like(self) -> list[torch.Tensor]:
        """Uninitialised CPU tensors shaped like its outputs at the problem's own sizes (none
        before its first trial there)."""
        return [torch.empty(shape, dtype=dtype) for shape, dtype in self.output_specs]

    @property
    def budget_left(self) -> int:
        """Bytes of the memory budget its kept outputs leave (for the timed outputs kept for checking)."""
        return max(0, self.memory_budget - self._kept_bytes)

    def close(self) -> None:
        self._kept.clear()
        self._degenerate = None
        self.device.release_cache()
        self.worker.close()
