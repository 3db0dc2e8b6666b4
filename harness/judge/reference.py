"""The problem's reference worker: loaded once per lane and problem, timed and profiled once, then
asked for expected outputs: each correctness trial's (kept, within a memory budget, for every
later candidate of the problem), and each verified timed call's. Trusted code, still confined."""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager

import torch

from ..records import EvalConfig, Problem, TimingStats
from ..worker.parent import REAL_TIME, Pace, Placement, Worker, WorkerStopped
from ..worker.protocol import MAX_BATCH_CALLS, MAX_TENSORS, Command, HardwareFloor, ParamDigest, Peaks, Profile, Reply, TensorRef, WorkerJob
from .degenerate import DegenerateCheck
from .integrity import REFERENCE_LIBRARY_TO_TELL_MS, REFERENCE_SPARSE_SAMPLES, mutated_inputs
from .timer import Feed, Timed, Timer, TimingPlan, timing_stats

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
# On a GPU the first calls after the reference sat idle are the slowest (on an H100 the first
# took 1.6 to 3 ms against 0.8 to 1.6 ms, and alone doubled the slack a forger gains), and the
# GPU's clocks, not locked there, fall while it idles: after a candidate kept the worker's core
# busy through its trials, the reference's overhead fell from 1.35 to 0.83 ms over its 24 calls.
# So there the recalibration first warms up, uncounted, for about WARM_MS of the reference's
# device time (WARM_COMMANDS, of the recalibration's batch: at least, at most). On the CPU nothing is uncounted: there the slack
# the first call widens covers honest kernels whose harness overhead (the outputs' commit, tens
# of ms for 256 MB) differs from the reference's (the main job flagged one in each of two runs
# without it, when the overhead was hundreds of ms of inputs made in the worker).
WARM_MS = 20.0
WARM_COMMANDS = (1, 16)
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
# The GPU runs one process's context at a time: while another process's context has work queued
# there, the reference's tiny kernels wait for a time slice (2.4 ms per round trip on an H100,
# against 0.013 ms with nothing else running; one slips through where another process's kernels
# leave a gap). The GPU is idle when none of four round trips in a row takes longer than this.
IDLE_ROUND_TRIP_MS = 0.5
IDLE_POLL_S = 0.01
# Held around every timing window with the launcher pids being timed (schedule/quiet.py).
Quiet = Callable[[list[int]], ContextManager]
# A CPU batch's inputs and outputs (judge/timer.py, BATCH_MS), at most: each is in four places at
# once (the reference's commit buffer, the timed worker's feed file, its outputs, their commit).
BATCH_BYTES = 128 << 20
# A GPU batch's, as a share of the device's memory: they are in one place, the timed worker's own
# memory (its commit describes them, the parent copies only the checked calls' outputs, within
# the budget of KEPT_SHARE), and the reference's recalibration at the same batch holds as much.
GPU_BATCH_SHARE = 1 / 16


def no_quiet(timed: list[int]) -> ContextManager:
    return contextlib.nullcontext()


def release_device_cache(device: str) -> None:
    """Give the device memory this process freed back to the GPU. PyTorch keeps freed blocks
    reserved for reuse; here they would be a previous problem's kept outputs or a candidate's
    copied timed outputs, the size of its outputs each, and the next workers (other processes)
    could not have them: a candidate ran out of memory beside 52 GB the harness no longer used."""
    if device == "cuda":
        torch.cuda.empty_cache()


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


def worker_job(role: str, problem: Problem, config: EvalConfig, peaks: Peaks | None = None) -> WorkerJob:
    """Both sides get the same seed, device and precision; only the reference may be timed
    through torch.compile."""
    return WorkerJob(role=role, problem_path="", device=config.device, precision=config.precision,
                     init_seed=config.seed, compile_baseline=role == "reference" and config.baseline == "compile",
                     peaks=peaks)


def memory_bytes(device: str, gpu: int | None) -> int:
    """The memory a run's shares are of: the lane's GPU's (`gpu` as this process numbers it; the
    current one where unknown), or the host's on a CPU run."""
    if device == "cuda":
        return torch.cuda.get_device_properties(torch.cuda.current_device() if gpu is None else gpu).total_memory
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class ReferenceRunner:
    """The problem's reference worker: loaded once, timed once, asked for expected outputs."""

    def __init__(self, problem: Problem, config: EvalConfig, key_dir: Path, placement: Placement = Placement(),
                 shrink: bool = False, peaks: Peaks | None = None, worker: Worker | None = None, quiet: Quiet = no_quiet,
                 pace: Pace = REAL_TIME):
        """`worker`: one booted ahead (a lane's spare), or None to boot one (paced by `pace`)."""
        self.problem, self.config, self.quiet = problem, config, quiet
        self.rng = random.SystemRandom()
        self.worker = worker or Worker(placement, role="reference", device=config.device, timeout_s=config.timeout_s,
                                       key_dir=key_dir, pace=pace)
        job = worker_job("reference", problem, config, peaks).model_copy(update={"shrink": shrink})
        self.worker.start(job, None, problem.source, key_dir)
        self.params: list[ParamDigest] = []
        self.timing: TimingStats | None = None
        self.default_math_timing: TimingStats | None = None  # GPU only: timed again under PyTorch's default math
        self.timed: Timed | None = None
        self.profile: Profile | None = None
        self.floor: HardwareFloor | None = None
        self.alt_sizes: list[dict[str, int]] = []
        self._kept: dict[tuple, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        self.memory_bytes = memory_bytes(config.device, placement.gpu)
        self._kept_bytes, self.memory_budget = 0, int(KEPT_SHARE * self.memory_bytes)
        self._degenerate: DegenerateCheck | None = None
        self._watched: set[int] = set()  # seeds fed to _degenerate
        self._degenerate_notes: list[str] | None = None  # its verdict, once every seed was seen
        self.output_specs: list[tuple[torch.Size, torch.dtype]] = []  # its outputs at the problem's own sizes
        self.output_form: str | None = None  # what its forward returns (None before its first trial)
        # The seeds last fed (each with its row), and their inputs stacked in this worker's commit buffer.
        self._fed_rows: dict[int, int] = {}
        self._fed_refs: list[TensorRef] = []
        self.batch_cap = 1  # calls one timed command may make (as many as memory and the protocol allow, `_batch_cap`)
        self.batch = 1  # calls per timed command in its own timing

    def _checked(self, reply_fn, what: str) -> Reply:
        try:
            reply = reply_fn()
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
        if not reply.ok:
            detail = reply.failure.exc_type + ": " + reply.failure.message if reply.failure else reply.rejected
            raise ReferenceFailed(f"reference {what} failed: {detail}"[:300])
        return reply

    def _request(self, command: Command, what: str) -> Reply:
        self._fed_rows = {}  # its commit buffer is about to be written again
        return self._checked(lambda: self.worker.request(command, f"reference {what}"), what)

    @property
    def peaks(self) -> Peaks | None:
        return Peaks(flops_per_ms=self.floor.peak_flops_per_ms, bytes_per_ms=self.floor.peak_bytes_per_ms) \
            if self.floor else None

    def load(self) -> None:
        loaded = self._checked(lambda: self.worker.reply("reference load", self.config.build_timeout_s), "load")
        self.params, self.alt_sizes = loaded.params or [], loaded.alt_sizes or []

    def start(self) -> None:
        """Load, measure the hardware floor (GPU), time once and profile one of the timed calls:
        what every candidate of the problem is held to."""
        self.load()
        if self.config.device == "cuda":
            self.floor = self._request(Command(op="floor", seed=self.rng.getrandbits(62)), "floor").floor
        self.batch_cap = self._batch_cap()
        timed = self._time(TimingPlan.of(self.config), profiled=1, warm_up=True, size=True, sample=True,
                           tell_library_ms=REFERENCE_LIBRARY_TO_TELL_MS, sparse_enough=REFERENCE_SPARSE_SAMPLES)
        if needs_second_look(timed.reported_ms):
            again = self._time(TimingPlan.of(self.config), profiled=0)
            timed.reported_ms += again.reported_ms
            timed.wall_ms += again.wall_ms
            timed.stopped = again.stopped
            timed.others_cores = max((share for share in (timed.others_cores, again.others_cores) if share is not None),
                                     default=None)
        self.timed = timed
        self.timing = timing_stats(timed.reported_ms, self.clock, timed.stopped, timed.batch, timed.others_cores)
        self.profile = timed.profiles[0] if timed.profiles else None
        if self.config.device == "cuda":
            self.default_math_timing = self._time_default_math()

    def _batch_cap(self) -> int:
        """Calls a timed command may make: as many as keep a batch's inputs and outputs within
        `_batch_bytes`, and no more than MAX_BATCH_CALLS (on a GPU, than a reply describes
        outputs, call by call); one where the outputs' shapes or dtypes change from seed to seed
        (nonzero, unique), which cannot be stacked a row per call nor checked alike. Measured on
        the first two correctness trials, kept (within the memory budget) for the first candidate
        where it makes them, which then need not wait for them."""
        specs, cap = [], MAX_BATCH_CALLS
        for trial in range(2):
            with self.expected(self.config.seed + TRIAL_SEED_OFFSET + trial,
                               keep=trial < self.config.correctness_trials) as (outputs, inputs):
                specs.append([(t.shape, t.dtype) for t in outputs])
                cap = min(cap, self._batch_bytes() // max(1, sum(t.nbytes for t in outputs + inputs)))
                if self.config.device == "cuda":
                    cap = min(cap, MAX_TENSORS // max(1, len(outputs)))
            if cap <= 1:
                return 1  # the second trial would change nothing
        return cap if specs[0] == specs[1] else 1

    def _batch_bytes(self) -> int:
        return int(GPU_BATCH_SHARE * self.memory_bytes) if self.config.device == "cuda" else BATCH_BYTES

    def _time(self, plan: TimingPlan, profiled: int, warm_up: bool = False, size: bool = False, sample: bool = False,
              batch: int | None = None, tell_library_ms: float = 0.0, sparse_enough: int | None = None) -> Timed:
        """Timed calls, `batch` to a command (its own batch by default); with `size`, its batch is
        sized first, after the warm-up; with `sample`, its threads sampled closely (on a CPU run),
        and sparsely on a CPU run always, as a candidate's: that costs every call alike (until the
        sparse samples tell `tell_library_ms` a call, or are `sparse_enough`: `Timer`)."""
        timer = Timer(self.worker, plan, self.rng, "reference timing", self._quiet, self.feeding(self.worker),
                      batch=batch or self.batch, cap=self.batch_cap, sample=sample and self.config.device == "cpu",
                      sparse=self.config.device == "cpu", tell_library_ms=tell_library_ms, sparse_enough=sparse_enough)
        if warm_up:
            self._checked(lambda: timer.warm_up(size=size), "warm-up")
            if size:
                self.batch = timer.batch
        try:
            timed, failed = timer.run(profiled=profiled)
        except WorkerStopped as stopped:
            raise ReferenceFailed(f"reference timing: {stopped.stop.error}") from None
        if failed is not None:
            self._checked(lambda: failed, "timing")
        return timed

    def _time_default_math(self) -> TimingStats:
        """The reference's time under PyTorch's default math flags (TF32 in cuDNN): what a user
        running PyTorch as shipped sees. Its outputs are never used as expected ones."""
        self._request(Command(op="math", default_math=True), "math flags")
        timed = self._time(TimingPlan.of(self.config), profiled=0, warm_up=True)
        self._request(Command(op="math", default_math=False), "math flags")
        return timing_stats(timed.reported_ms, self.clock, timed.stopped, others_cores=timed.others_cores)

    def _quiet(self) -> ContextManager:
        return self.quiet([self.worker.pid])

    @property
    def clock(self) -> str:
        return "cuda_event" if self.config.device == "cuda" else "perf_counter"

    def recalibrate(self, batch: int) -> Recalibration:
        """The harness's per-call overhead and the reference's own time as measured right now,
        with the machine's current load: a few reference commands timed the way a candidate's
        are, `batch` calls each (the candidate's: a command's overhead is shared by its calls).
        A reference quick enough to be timed in batches itself gets as many commands as
        `surely_faster` needs at least: quick problems are the ones whose first timing drifts
        most (a slow one recalibrated at a quick candidate's batch would pay seconds for them)."""
        fewest, most = RECALIBRATION_CALLS
        if batch > 1 and self.batch > 1:
            fewest = max(fewest, UNTIMED_CALLS + SURELY_FASTER_CALLS)
        commands = max(fewest, min(most, int(RECALIBRATION_BUDGET_MS / max(self.timing.median_ms * batch, 1e-3))))
        uncounted = self._warm_commands(batch)
        timed = self._time(TimingPlan.of(self.config).model_copy(update={"fixed": uncounted + commands}), profiled=0,
                           batch=batch)
        # Only these: the reference's own timing ran when the lane was busier (the next worker
        # booting beside it), and an overhead taken then is larger than a candidate's now.
        return Recalibration(overhead_ms=timed.overhead_ms[uncounted:], commit_ms=timed.commit_ms[uncounted:],
                             timing=timing_stats(timed.reported_ms[max(uncounted, UNTIMED_CALLS):], self.clock,
                                                 timed.stopped, timed.batch, timed.others_cores))

    def profiled_now(self, calls: int) -> Timed:
        """`calls` profiled commands and as many plain ones (of its own batch), after a warm-up,
        made now: what the profiler costs the reference on the machine as it is when a
        candidate's profiled calls came out slow."""
        return self._time(TimingPlan.of(self.config).model_copy(update={"fixed": calls}), profiled=calls, warm_up=True)

    def device_idle_within(self, wait_s: float) -> bool:
        """Whether the reference's GPU runs no other process's work, waiting up to `wait_s` for
        what runs there to end (GPU runs only)."""
        return self._waited_for_idle_ms(wait_s) is not None

    def busy_ms(self, wait_s: float) -> float:
        """How long the GPU went on running another process's work, by the parent's clock, up to
        `wait_s`: 0 where the first look finds it idle (GPU runs only)."""
        waited_ms = self._waited_for_idle_ms(wait_s)
        return wait_s * 1000 if waited_ms is None else waited_ms

    def _waited_for_idle_ms(self, wait_s: float) -> float | None:
        """Milliseconds from the first look until the GPU ran no other process's work (0: idle at
        the first look); None: still busy after `wait_s`."""
        began, deadline = time.perf_counter(), time.monotonic() + wait_s
        looks = 0
        while True:
            round_trip_ms = self._request(Command(op="settle"), "idle check").elapsed_ms
            looks += 1
            if round_trip_ms is None or round_trip_ms <= IDLE_ROUND_TRIP_MS:
                return 0.0 if looks == 1 else (time.perf_counter() - began) * 1000
            if time.monotonic() >= deadline:
                return None
            time.sleep(IDLE_POLL_S)

    def _warm_commands(self, batch: int) -> int:
        if self.config.device == "cpu":
            return 0
        fewest, most = WARM_COMMANDS
        return max(fewest, min(most, math.ceil(WARM_MS / max(self.timing.median_ms * batch, 1e-3))))

    def feeding(self, target: Worker) -> Feed | None:
        """On a CPU run, how `target`'s timed calls get their inputs: made here, written into it
        (the reference's own calls too, so that its overhead is measured the way a candidate's
        is). None on a GPU, where a worker makes its inputs on the device in microseconds."""
        return (lambda seeds: self._feed(target, seeds)) if self.config.device == "cpu" else None

    def _feed(self, target: Worker, seeds: list[int]) -> list[TensorRef] | None:
        reply = self._request(Command(op="inputs", seeds=seeds), "inputs")
        if reply.inputs is None:
            return None
        with self._held(reply.inputs, "inputs") as inputs:
            fed = target.feed(inputs, "timing")  # a worker that does not stop for it: its own failure
        if target is not self.worker:  # its own timed call would write over them
            self._fed_rows, self._fed_refs = {seed: index for index, seed in enumerate(seeds)}, reply.inputs
        return fed

    @contextlib.contextmanager
    def _held(self, refs: list[TensorRef], what: str) -> Iterator[list[torch.Tensor]]:
        """Its tensors at `refs`, views of its commit buffer, its worker stopped meanwhile. Only its
        own failure to be read is the reference's, not those inside the block."""
        with contextlib.ExitStack() as reading:
            try:
                tensors = reading.enter_context(self.worker.reading(refs, f"reference {what}", held=True))
            except WorkerStopped as stopped:
                raise ReferenceFailed(f"reference {what}: {stopped.stop.error}") from None
            yield tensors
            del tensors  # no view may outlive the block: its memory is unmapped or reused then

    def fed_inputs_left(self, target: Worker, calls: list[tuple[int, list[TensorRef]]]) -> list[list[torch.Tensor] | None]:
        """Per call of `target`'s last timed command (its seed; where its inputs are in `target`'s
        feed file), copies of those inputs as its forward left them if it changed any (None
        otherwise): byte for byte against this worker's own, still in its commit buffer (it ran
        nothing since it made them), all read and copied in one window with `target` stopped."""
        if any(seed not in self._fed_rows for seed, _ in calls):
            raise RuntimeError("the reference's last inputs are not the ones fed for these calls")
        mine = [ref.row(self._fed_rows[seed]) for seed, _ in calls for ref in self._fed_refs]
        theirs = [ref for _, fed in calls for ref in fed]
        with self._held(mine, "inputs") as made, target.fed_back(theirs, "timing") as left:
            found, start = [], 0
            for seed, fed in calls:
                made_now, left_now = made[start:start + len(fed)], left[start:start + len(fed)]
                start += len(fed)
                found.append([t.clone() for t in left_now] if mutated_inputs(made_now, left_now) else None)
            return found

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
        reply = self._request(Command(op="trial", seed=seed, sizes=sizes), "trial")
        self.output_form = reply.form
        with self._held(reply.outputs + reply.inputs, "trial") as both:
            outputs, inputs = both[:len(reply.outputs)], both[len(reply.outputs):]
            del both
            if not sizes:
                self.output_specs = [(t.shape, t.dtype) for t in outputs]
            size = sum(t.nbytes for t in outputs + inputs)
            if keep and self._kept_bytes + size <= self.memory_budget:
                # Into segments of their own: a clone that splits a larger freed block (a candidate's
                # 8.5 GB timed-output copy, before a smaller other-shapes output is kept) pins the
                # whole block for as long as the problem's candidates run (7.2 GB on an H200).
                release_device_cache(self.config.device)
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
        if self.config.device == "cuda":
            torch.cuda.synchronize()
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
        release_device_cache(self.config.device)
        self.worker.close()
