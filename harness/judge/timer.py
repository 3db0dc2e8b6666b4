"""The timing phase, driven by the parent: `timed` commands of one call each (of a batch of calls
for quick ones, see BATCH_MS), each call on inputs made from a seed the worker learns only with
that command. The parent decides in secret which calls it verifies (after their command's
outputs are described; the reference computes the same seeds) and which commands it profiles
(a profiled command says so only as it arrives); it times every command with its own clock
too. Timing is adaptive: it stops when the median's 95% interval is
within ±1%, or the model's time budget is spent, never before `min_trials` samples nor after
`max_trials` calls (a sample of a CPU batch is that many calls; a fixed count of samples with
--trials N). A checked call's outputs are copied out at once
(the worker cannot change them afterwards) and compared with the reference's after the last
call, so the timed calls follow one another without the reference's work in between. On a GPU,
after a checked call the worker is told to `settle` (run tiny kernels of its own) before its next
timed call: the copy ran in the parent's CUDA context, and switching back to the worker's cost its
next call 0.2 ms on an H100 (0.51 against 0.32 ms of overhead for an 8 MB relu), outside the
reported time but inside the parent's clock, where the reference's overhead calls, never checked,
do not pay it; honest sub-millisecond kernels were flagged `timing_disagrees` for it. The worker
learns that a call was checked only once its outputs are copied (or compared, past the memory
budget).

What a worker reports is only believed as far as the parent's clock allows: a call cannot take
less than the parent saw it take, less the per-call overhead measured on the reference worker
just before (same inputs, same outputs, same machine load), less a slack from that overhead's
own spread (vouched_median). On a CPU run the inputs are fed (`feed`): the reference makes them
from the seed and the parent writes them into the worker before the clock starts, so the
overhead the bound subtracts is only the command's round trip, not the making of hundreds of
megabytes of random inputs (which varied by 5% from worker to worker, more than a quick kernel's
whole time). There the outputs are not copied anywhere by the worker either: the reply says where
they are, and the parent reads the checked ones from the stopped worker's memory (`_call`): a
copy made in the candidate's process could hide its work (on a GPU they are described in a
`commit`, IPC handles, timed apart).
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ContextManager

from pydantic import BaseModel

from ..records import EvalConfig, TimingBound, TimingStats
from ..worker import processes
from ..worker.parent import Worker
from ..worker.protocol import ALLOWED_DTYPES, Command, Profile, Reply, TensorRef, call_outputs
from ..worker.sampling import SPARSE_PERIOD_NS, CpuSamples, Sampler

TARGET_HALF_WIDTH = 0.01  # the median's 95% interval within ±1% of it
Z95 = 1.96
# The chance that a one-call command's outputs are checked, in the first EARLY_CALLS commands and
# after them (a batch is always verified, see `_run`).
VERIFY_EARLY, VERIFY_LATE, EARLY_CALLS = 0.5, 0.2, 20
PROFILE_CHANCE, MIN_PROFILED = 0.1, 2
# The parent's clock against a worker's: wake-up latency and scheduling jitter, which grow when the
# machine idles through a long call (a worker asleep in a kernel) and are not seen on the quick
# calls that measure the overhead. Measured: docs/threat-model.md, "The timing bound".
MIN_SLACK_MS = {"cuda": 0.05, "cpu": 1.0}
SLACK_SPREADS = 4.0  # slack: this many median absolute deviations of the reference's overhead
# The reference's overhead, measured in its own process, foretells the candidate's to within this
# share of it. On the 2-core VM, where processes float between the cores, an honest candidate's
# per-call overhead in a batch came to 0.79 to 1.39 times the reference's over three integrity runs
# and four smaller ones (a C++ relu's 18.4 against 13.6 us, with 13.5 us calls: flagged, and cut to
# 0.7 of its speed, in two runs of three). With both pinned to one core it was 0.83 to 1.11, but
# that cost the run half as much time again (docs/threat-model.md). On a GPU the overhead's drift
# between recalibrations is the forgers' as much as anyone's (docs/threat-model.md): none there.
OVERHEAD_ERROR = {"cuda": 0.0, "cpu": 0.4}
DISAGREE_FACTOR = 1.1  # a vouched median this far above the reported one (and by more than the slack) is flagged
# In batches, a reported median below 1/IMPLAUSIBLE_FACTOR of what the clock saw (less the harness's
# overhead), and short of it by more than the clock's resolution (a command's least slack, shared
# by its calls), is flagged whatever the slack: there a few commands' jitter made the slack larger
# than a whole tiny call (a forger reporting 1 ns got 10,266x). Honest workers' clock times came
# to up to 1.40 (a C++ relu) and 1.61 (a Python one) times their reports over ten integrity runs
# (docs/threat-model.md): a forger within it gains up to 1.67x, where the harness's overhead is
# as long as the call (the slack's share of it bounds the rest), and less the longer the call.
IMPLAUSIBLE_FACTOR = 2.0
# Cores, on average, that processes outside a CPU run may keep busy while a model is timed before
# its result says the machine was busy (`busy_machine`). On the 2-core VM: 0.0 to 0.04 in an idle
# integrity run; beside two busy loops 1.0 to 1.2 while the main job's models were timed (1.0 to
# 1.4 for the tiny ones), and the speedups came out 0.9x to 2.0x their idle figures the same hour
# (1.1x to 3.2x in an earlier pair of runs). With windows of a quarter of a second measured too:
# 0.0 to 0.03 in idle runs of the tiny problems, 0.82 to 1.41 beside one or two busy loops.
BUSY_CORES = 0.25


# Calls shorter than this are timed several to a command, one after another, each on inputs of
# its own (a batch): the parent's clock vouches for a command to within the slack (1 ms at least
# on the CPU), which a quicker call would fit inside whole (a 0.03 ms relu reporting 1 ns scored
# 29,604x). A batch takes about this long by the parent's clock, so a forger gains at most about a
# twentieth of its time (a tenth, where its batches take half as long: any shorter is timed
# again, `ShortBatch`). Its size is the timed worker's own (a slow candidate's batch is no longer
# than a quick one's), found by the parent's clock, as large as memory and the protocol allow
# (`cap`). On a GPU what a batch shares is the command's overhead, a few tenths of a millisecond
# that drift from one worker and one command to the next (the GPU's clocks ramp up again after
# each pause): with one call to a command a forger of a 0.7 ms relu gained up to 7x inside it
# (docs/threat-model.md). Each call there is still flushed and timed alone (worker/child.py).
BATCH_MS = 20.0
RAMP_FACTOR = 8  # sizing: batches of 1, 8, 64, ... calls until one takes half of BATCH_MS
# Calls of a verified batch whose outputs are checked, at most (all of them, in a smaller batch).
# On a GPU a fifth of the batch's calls (as many checks a call as one-call commands got after
# their first 20), at least two: there batches are a sixteenth of the device's memory at most
# (nine calls of the 0.7 ms relu) and a timing makes many of them, and eight a batch made the
# reference's checks most of a quick kernel's timing (`checked_calls`).
CHECKED_PER_BATCH = 8
CHECKED_SHARE_GPU, CHECKED_LEAST_GPU = VERIFY_LATE, 2
# Calls of a profiled command, at most: a worker knows it is watched while it is (the profiler is
# on), so a smaller batch tells it nothing new, and a path slow only when watched costs so many
# calls, not a whole batch of them (a 0.1 s one once ran past the timeout in a batch of 1,024).
# One on a GPU: there the calls of a batch are flushed and timed one by one (worker/child.py),
# and a profiled command's calls, timed as one under the profiler, would run back to back.
PROFILED_BATCH = {"cpu": 8, "cuda": 1}
# Garbage words written into a CPU timed command's outputs before they are let go (`spoiled_words`):
# one process_vm_writev of 1,024 pieces, 1.5 ms a command with the worker stopped and resumed on
# the 2-core VM.
SPOILED_WORDS, WORD = 1024, 4
# Timed commands sampled from outside instead of recorded (a CPU run's candidates and references,
# worker/sampling.py), chosen like the profiled ones: sampling slows a call (about 10 us a sample
# on the 2-core VM, where a timer interrupt leaves the VM), so their times would bias the median.
# Two commands gave 350 to 21,000 samples for the main job's kernels and for a 0.1 ms softmax.
# Where fewer (a host whose sample rate makes the period longer, worker/sampling.py: at 2,500
# samples a second a 0.24 ms softmax reference gave 63 library samples in 8 commands), the commands
# after them are sampled too until ENOUGH_SAMPLES were taken or they took SAMPLING_MOST_S (at 1,000
# a second, half a second of the softmax gave 39 library samples, too few for the rule in
# judge/integrity.py; a second, 113). By time, not commands: 32 commands of 8 calls gave it 24.
# Samples of work only (`Sampler.working`): beside a busy loop, the commands sampled of that
# softmax gave 952 samples, 37 of them in library code, most of the rest one thread waiting for
# the other.
SAMPLED_COMMANDS, ENOUGH_SAMPLES, SAMPLING_MOST_S = 2, 400, 1.0
# How long a timing goes on past its plan for its sparse samples (`Timer`): at most this. A 0.25
# ms softmax reference spends 0.12 ms a call in library code, which 1,070 calls tell at 2 ms;
# feeding a command of 32 calls their fresh inputs took 0.1 s on the 2-core VM.
SPARSE_MOST_S = 2.0


@dataclass(frozen=True)
class Call:
    """One call of a timed command, as the parent checks it: its seed, where its outputs are, and
    where its inputs were fed (None: the worker made them from the seed)."""

    seed: int
    outputs: list[TensorRef]
    fed: list[TensorRef] | None


@dataclass(frozen=True)
class ShortBatch:
    """A batch of fewer calls than the cap that took less than half of BATCH_MS by the parent's
    clock: the worker was slower while its batches were sized than now (why time it again)."""

    calls: int
    wall_ms: float

    def implied(self, cap: int) -> int:
        """The batch that would take about BATCH_MS at this one's speed, within `cap`."""
        return min(cap, math.ceil(self.calls * BATCH_MS / max(self.wall_ms, 1e-3)))


# Seeds' inputs, written into the timed worker stacked (a row per seed): where they are.
Feed = Callable[[list[int]], "list[TensorRef] | None"]
Check = Callable[[list[Call]], object]  # a verified command's chosen calls: an objection or None


class TimingPlan(BaseModel):
    """How long a model is timed (from EvalConfig)."""

    warmup: int
    fixed: int | None  # --trials N; None: adaptive
    min_trials: int
    max_trials: int
    budget_s: float
    device: str

    @classmethod
    def of(cls, config: EvalConfig) -> TimingPlan:
        return cls(warmup=config.warmup, fixed=config.trials, min_trials=config.min_trials,
                   max_trials=config.max_trials, budget_s=config.time_budget_s, device=config.device)


@dataclass
class Timed:
    """What a timing phase produced: per unprofiled call the worker's time and the parent's."""

    reported_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)  # the command, and on a GPU its outputs' commit
    commit_ms: list[float] = field(default_factory=list)  # the commit alone (a GPU's)
    profiles: list[Profile] = field(default_factory=list)
    profiled_wall_ms: list[float] = field(default_factory=list)  # the parent's clock around the profiled calls
    stopped: str = "max_trials"
    threads_alive: int = 0
    batch: int = 1  # calls per timed command: each time above is per call, the command's over this
    profiled_most: int = PROFILED_BATCH["cpu"]  # calls per profiled command, at most
    others_cores: float | None = None  # a CPU run: cores other processes kept busy meanwhile (processes.OthersCpu)
    cpu_samples: CpuSamples | None = None  # a CPU run: where the worker's threads ran, sampled from outside
    sparse_samples: CpuSamples | None = None  # the same, sampled sparsely on all the other commands (`Timer`)
    sampling_refusal: str | None = None  # why either could not be sampled (the other may have been)
    sampled_commands: int = 0  # commands sampled from outside (their calls are not in the lists above)
    sampled_wall_ms: float = 0.0  # their time by the parent's clock

    @property
    def profiled_batch(self) -> int:
        """Calls per profiled command."""
        return min(self.batch, self.profiled_most)

    @property
    def overhead_ms(self) -> list[float]:
        """Per call, what the parent saw beyond what the worker reported."""
        return [w - r for w, r in zip(self.wall_ms, self.reported_ms)]


def checked_calls(calls: int, device: str) -> int:
    """How many calls of a verified command of `calls` calls are checked (CHECKED_PER_BATCH)."""
    if device == "cpu":
        return min(calls, CHECKED_PER_BATCH)
    return min(calls, CHECKED_PER_BATCH, max(CHECKED_LEAST_GPU, math.ceil(CHECKED_SHARE_GPU * calls)))


def median_interval(samples: list[float]) -> tuple[float, float]:
    """The median's distribution-free 95% interval: order statistics n/2 ± 1.96·√n/2."""
    ordered = sorted(samples)
    n = len(ordered)
    spread = Z95 * math.sqrt(n) / 2
    return ordered[max(0, math.floor(n / 2 - spread))], ordered[min(n - 1, math.ceil(n / 2 + spread))]


def converged(samples: list[float]) -> bool:
    low, high = median_interval(samples)
    median = statistics.median(samples)
    return median > 0 and (high - low) / 2 <= TARGET_HALF_WIDTH * median


def timing_stats(samples_ms: list[float], clock: str, stopped: str | None = None, calls_per_sample: int = 1,
                 others_cores: float | None = None) -> TimingStats:
    ordered = sorted(samples_ms)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    low, high = median_interval(ordered)
    return TimingStats(median_ms=statistics.median(ordered), iqr_ms=q3 - q1, mean_ms=statistics.fmean(ordered),
                       min_ms=ordered[0], max_ms=ordered[-1], n=len(ordered), samples_ms=samples_ms, clock=clock,
                       ci_low_ms=low, ci_high_ms=high, stopped=stopped, calls_per_sample=calls_per_sample,
                       others_cores=others_cores)


def spoiled_words(outputs: list[TensorRef], addresses: list[list[int]], rng: random.Random) -> list[int]:
    """Where to write garbage in a timed command's outputs before the worker lets them go: words at
    random in every call's outputs, SPOILED_WORDS in all (at least one in each output). A candidate
    that keeps a ring of outputs with their constant part written once, and returns each again
    later writing only the rest, returns garbage there (a padded relu's ring had scored 4.1x
    against an honest 1.0x, 2026-12-04); one that writes its outputs whole is not touched."""
    spans = []
    for call in addresses:
        for ref, address in zip(outputs, call):
            begin = address + ref.storage_offset * ALLOWED_DTYPES[ref.dtype].itemsize if ref.dtype in ALLOWED_DTYPES \
                else address
            if address + ref.span_bytes - begin >= WORD:
                spans.append((begin, address + ref.span_bytes))
    each = max(1, SPOILED_WORDS // max(1, len(spans)))
    return [begin + WORD * rng.randrange((end - begin) // WORD) for begin, end in spans for _ in range(each)]


class Timer:
    """Drives one worker's timing phase. `check(calls)` is asked about the calls chosen for
    verification (it returns a reason to stop, or None, once it has copied or compared their
    outputs); nothing of the choice reaches the worker before that."""

    def __init__(self, worker: Worker, plan: TimingPlan, rng: random.Random, phase: str = "timing",
                 quiet: Callable[[], ContextManager] = contextlib.nullcontext, feed: Feed | None = None,
                 batch: int = 1, cap: int = 1, insist: bool = False, drain: Callable[[], float] | None = None,
                 spoil: bool = False, sample: bool = False, sparse: bool = False, tell_library_ms: float = 0.0,
                 sparse_enough: int | None = None):
        """`quiet()` is held around the timed calls (on a CPU run: the run's other workers frozen);
        `feed(seeds)` writes the inputs of seeds into the worker (None: it makes them itself);
        `batch`: calls per timed command, at most `cap` (`warm_up` sizes it when `cap` allows more
        than one); `insist`: a batch too short for the bound stops the timing (`ShortBatch`);
        `drain()`: on a GPU, how long in ms the GPU goes on running the worker's work after a
        verified command's reply, charged to that command (see `_run`). A window of `quiet()` may
        measure what processes outside the run used meanwhile (`processes.OthersCpu`, recorded as
        `Timed.others_cores`). `spoil`: garbage goes into a CPU command's outputs before they are
        let go (`spoiled_words`; a candidate's, not the trusted reference's, which may return a
        buffer of its own). `sample`: the worker's threads are sampled (worker/sampling.py) in
        timed commands chosen at random, whose times are not recorded (`Timed.cpu_samples`).
        `sparse`: they are sampled on all the other timed commands too, the profiled ones excepted,
        at SPARSE_PERIOD_NS (`Timed.sparse_samples`): too rarely for a candidate to notice, so one
        cannot do its own work only while sampled closely. Where their calls are too few to tell
        library CPU time of `tell_library_ms` a call (`Sampler.tells`), the timing goes on past
        its plan, for SPARSE_MOST_S at most (stopped: "sampling"), or until they are `sparse_enough`
        samples of work in all (a trusted reference's, whose work is all on its calls: a candidate's other
        threads could take them spinning)."""
        self.worker, self.plan, self.rng, self.phase, self.quiet, self.feed = worker, plan, rng, phase, quiet, feed
        self.batch, self.cap, self.insist, self.drain, self.spoil = batch, cap, insist, drain, spoil
        self.sample, self.sparse, self.tell_library_ms, self.sparse_enough = sample, sparse, tell_library_ms, sparse_enough
        self._sampler: Sampler | None = None  # during a `run` that samples the worker
        self._sparse: Sampler | None = None  # during a `run` that samples it sparsely
        self._planned_at = 0.0  # when the plan of the last `run` had its timing stop
        # The last timed command's outputs (CPU), held where they are until `release`: their
        # descriptions and each call's addresses.
        self._located: tuple[list[TensorRef], list[list[int]]] | None = None

    def seed(self) -> int:
        return self.rng.getrandbits(62)

    def _fed(self, seeds: list[int]) -> list[TensorRef] | None:
        return self.feed(seeds) if self.feed is not None else None

    def warm_up(self, size: bool = False, calls: int | None = None) -> Reply:
        """Untimed calls (the plan's warm-up, or `calls`); with `size`, then the batch sized
        (`size_batch`), with the run's other workers quiet as for timed calls (a batch sized
        while they ran came out too small for the quiet window). The failed reply, if one failed."""
        seeds = [self.seed() for _ in range(self.plan.warmup if calls is None else calls)]
        warm = self.worker.request(Command(op="warmup", seeds=seeds, fed=self._fed(seeds[-1:]) if seeds else None),
                                   self.phase)
        if not warm.ok or not size or self.cap == 1:
            return warm
        with self.quiet():
            return self.size_batch(warm.elapsed_ms)

    def size_batch(self, warm_ms: float | None) -> Reply:
        """Calls per timed command, so that one takes about BATCH_MS by the parent's clock: one,
        when the worker's fastest warm-up call took that long (a worker that says so falsely is
        caught out by its short batches later, `insist`); otherwise found with batches of growing
        size, untimed, whose time only the parent's clock gives. The failed reply, if one failed."""
        self.batch = 1
        if warm_ms is not None and warm_ms >= BATCH_MS:
            return Reply(ok=True)
        calls = 1
        while True:
            reply, _, wall_ms = self._call(None, [self.seed() for _ in range(calls)], profile=False)
            if not reply.ok:
                return reply
            if wall_ms >= BATCH_MS / 2 or calls >= self.cap:
                self.batch = max(1, min(self.cap, math.ceil(calls * BATCH_MS / wall_ms)))
                return self._let_go()
            calls = min(self.cap, calls * RAMP_FACTOR)

    def run(self, check: Check | None = None, profiled: int = MIN_PROFILED) -> tuple[Timed, object]:
        """(what was measured, the first thing `check` objected to, or the failed reply, or None)."""
        with self.quiet() as others, self._sampling() as (sampler, sparse):
            timed, failed = self._run(check, profiled)
        timed.others_cores = others.cores if isinstance(others, processes.OthersCpu) else None
        timed.cpu_samples = sampler.samples if sampler is not None else None
        timed.sparse_samples = sparse.samples if sparse is not None else None
        timed.sampling_refusal = next((s.refusal for s in (sampler, sparse) if s is not None and s.refusal), None)
        if failed is None and not (released := self._let_go()).ok:
            return timed, released
        return timed, failed

    @contextlib.contextmanager
    def _sampling(self) -> Iterator[tuple[Sampler | None, Sampler | None]]:
        """The samplers of a `run`, closely (`sample`) and sparsely (`sparse`), None where not asked for."""
        def pids() -> list[int]:
            return processes.tree(self.worker.worker_pid)
        with Sampler(pids) if self.sample else contextlib.nullcontext() as self._sampler, \
                Sampler(pids, least_ns=SPARSE_PERIOD_NS) if self.sparse else contextlib.nullcontext() as self._sparse:
            try:
                yield self._sampler, self._sparse
            finally:
                self._sampler = self._sparse = None

    def _run(self, check, profiled: int) -> tuple[Timed, object]:
        timed, began, commands = Timed(batch=self.batch, profiled_most=PROFILED_BATCH[self.plan.device]), time.monotonic(), 0
        profile_at, sample_at = self._special_commands(profiled, SAMPLED_COMMANDS if self._sampling_now else 0)
        if self.batch > 1:
            # A batch's first command after a pause (a recalibration, a sizing) paid twice the
            # commit of the next ones (memory handed back slowly, a commit buffer grown): it is not
            # recorded, or an honest candidate's first overhead alone got it `timing_disagrees`.
            primed, _, _ = self._call(None, [self.seed() for _ in range(self.batch)], profile=False)
            if not primed.ok:
                return timed, primed
        while not self._done(timed, began, len(profile_at)):
            profiled = commands in profile_at
            sampled = commands in sample_at or (not profiled and timed.sampled_commands >= len(sample_at)
                                                and self._sampling_due())
            seeds = [self.seed() for _ in range(timed.profiled_batch if profiled else self.batch)]
            # A batch is verified every time (some of its calls, `checked_calls`): batched timings
            # stop after a handful of commands, which a coin would leave all unchecked now and then.
            verify = check is not None and (len(seeds) > 1 or
                                            self.rng.random() < (VERIFY_EARLY if commands < EARLY_CALLS else VERIFY_LATE))
            reply, fed, wall_ms = self._call(timed, seeds, profile=profiled, sampled=sampled)
            commands += 1
            if not reply.ok:
                return timed, reply
            if verify and self.drain is not None:
                # Kernels a worker queues after its last call's end event run while the parent reads
                # the checked outputs, off the clock (an unverified command's are waited for inside
                # the next one): the time the GPU stays busy with them is this command's.
                (timed.profiled_wall_ms if profiled else timed.wall_ms)[-1] += self.drain() / len(seeds)
            # The outputs are copied before the worker gets another command (its profile's included).
            objection = check(self._chosen(seeds, reply, fed)) if verify else None
            if objection is not None:
                return timed, objection
            if profiled and not (summary := self._profile(timed)).ok:
                return timed, summary
            if verify and self.plan.device == "cuda" and not (settled := self._settle()).ok:
                return timed, settled
            if self.insist and not profiled and self.batch < self.cap and wall_ms < BATCH_MS / 2:
                return timed, ShortBatch(self.batch, wall_ms)
        return timed, None

    def _chosen(self, seeds: list[int], reply: Reply, fed: list[TensorRef] | None) -> list[Call]:
        """The calls of a verified command whose outputs are checked, chosen now, in secret."""
        calls = len(seeds)
        return [Call(seeds[index], self._outputs_of(reply, index, calls), [ref.row(index) for ref in fed] if fed is not None else None)
                for index in sorted(self.rng.sample(range(calls), checked_calls(calls, self.plan.device)))]

    @staticmethod
    def _outputs_of(reply: Reply, index: int, calls: int) -> list[TensorRef]:
        """Where the `index`th call's outputs are: in the worker's memory (located), or as the
        commit described them."""
        if reply.addresses is not None:
            return [ref.model_copy(update={"address": address}) for ref, address in zip(reply.outputs, reply.addresses[index])]
        return call_outputs(reply.outputs, index, calls)

    def _let_go(self) -> Reply:
        """The last timed command's outputs, held where they are for the parent to read, let go
        (the worker frees them on no clock)."""
        if self._located is None:
            return Reply(ok=True)
        (outputs, addresses), self._located = self._located, None
        if self.spoil and (words := spoiled_words(outputs, addresses, self.rng)):
            self.worker.spoil(words, self.phase)
        return self.worker.request(Command(op="release"), self.phase)

    def _settle(self) -> Reply:
        """The worker takes the GPU back from the parent's copy of a checked output (see above)."""
        return self.worker.request(Command(op="settle"), self.phase)

    def profile_more(self, timed: Timed, count: int) -> Reply | None:
        """`count` more profiled calls into `timed` (a second look, when the first ones were slow);
        the failed reply, if one fails."""
        with self.quiet():
            for _ in range(count):
                reply, _, _ = self._call(timed, [self.seed() for _ in range(timed.profiled_batch)], profile=True)
                if not reply.ok:
                    return reply
                if not (summary := self._profile(timed)).ok:
                    return summary
        released = self._let_go()
        return None if released.ok else released

    def _profile(self, timed: Timed) -> Reply:
        """The last profiled call's profile, asked for after the clock stopped: reading the
        profiler's events is no call's cost (worker/child.py)."""
        summary = self.worker.request(Command(op="profile"), self.phase)
        if summary.ok:
            timed.profiles.append(summary.profile.per_call(timed.profiled_batch))
        return summary

    def _call(self, timed: Timed | None, seeds: list[int], profile: bool,
              sampled: bool = False) -> tuple[Reply, list[TensorRef] | None, float]:
        """One timed command, a call per seed: recorded per call in `timed` (None: not recorded)
        if it succeeded; the reply, where its inputs were fed (if they were), and its time by the
        parent's clock. On a CPU run the reply says where the outputs are in the worker's memory,
        read there by the parent (`check`) before the worker gets another command, the first of
        which lets them go (`release`, on no clock); on a GPU they are described (`commit`,
        timed apart, the commit's time included in the wall). Fed inputs go with no seeds. A
        `sampled` command's threads are sampled, and its time is not recorded (sampling slows a
        call)."""
        if not (released := self._let_go()).ok:
            return released, None, 0.0
        fed, calls = self._fed(seeds), len(seeds)
        locate = self.plan.device == "cpu"
        command = Command(op="timed", seeds=[] if fed is not None else seeds, calls=calls, fed=fed, profile=profile,
                          locate=locate)
        with self._watching(calls, profile, sampled):
            sent = time.perf_counter()
            reply = self.worker.request(command, self.phase)
            replied = time.perf_counter()
        # The sampler's reading of its events once the reply is in is not the worker's time: for a
        # worker of 600 threads on two CPUs (an event per thread per CPU), it had made the wall 0.8
        # ms a call longer.
        self._located = (reply.outputs or [], reply.addresses or []) if locate and reply.ok else None
        committing = time.perf_counter()
        if reply.ok and not locate:
            committed = self.worker.request(Command(op="commit", calls=calls), self.phase)
            reply = reply.model_copy(update={"outputs": committed.outputs}) if committed.ok else committed
        commit_ms = (time.perf_counter() - committing) * 1000
        wall_ms = (replied - sent) * 1000 + commit_ms
        if not reply.ok or timed is None:
            return reply, fed, wall_ms
        timed.threads_alive = max(timed.threads_alive, reply.threads_alive)
        if sampled:
            timed.sampled_commands += 1
            timed.sampled_wall_ms += wall_ms
        elif profile:  # its profile is asked for next (`_profile`)
            timed.profiled_wall_ms.append(wall_ms / calls)
        else:
            timed.reported_ms.append(reply.elapsed_ms / calls)
            timed.wall_ms.append(wall_ms / calls)
            if not locate:
                timed.commit_ms.append(commit_ms / calls)
        return reply, fed, wall_ms

    def _watching(self, calls: int, profile: bool, sampled: bool) -> ContextManager:
        """The sampling of a command: close where chosen, sparse where not profiled."""
        if sampled:
            return self._sampler.watching(calls)
        if self._sparse is not None and not profile:
            return self._sparse.watching(calls)
        return contextlib.nullcontext()

    @property
    def _sampling_now(self) -> bool:
        return self._sampler is not None and self._sampler.active

    def _sampling_due(self) -> bool:
        """Whether more commands are to be sampled: the chosen ones first, then more while the
        samples kept are fewer than two commands' or too few to tell (a host's low sample rate;
        none kept where the kernel throttled sampling and it started over)."""
        if not self._sampling_now:
            return False
        sampler = self._sampler
        return sampler.blocks < SAMPLED_COMMANDS or (sampler.working < ENOUGH_SAMPLES and sampler.watched_s < SAMPLING_MOST_S)

    def _special_commands(self, profiled: int, sampled: int) -> tuple[set[int], set[int]]:
        """Which commands are profiled and which sampled: so many at random among the first
        commands every timing makes."""
        first = min(self.plan.min_trials, self.plan.fixed or self.plan.min_trials) + profiled + sampled
        chosen = self.rng.sample(range(first), profiled + sampled)
        return set(chosen[:profiled]), set(chosen[profiled:])

    def _done(self, timed: Timed, began: float, profiles_due: int) -> bool:
        # Profiled and sampled commands are among the first ones: never skipped.
        if len(timed.profiles) < profiles_due or self._sampling_due():
            return False
        if (stopped := self._plan_stopped(timed, began)) is None:
            return False
        if timed.stopped != "sampling":
            timed.stopped, self._planned_at = stopped, time.monotonic()
        if self._sparse_due():
            timed.stopped = "sampling"
            return False
        return True

    def _sparse_due(self) -> bool:
        """Whether the calls sampled sparsely are too few to tell `tell_library_ms` a call, within
        SPARSE_MOST_S of the plan's end."""
        sparse = self._sparse
        if sparse is None or not sparse.active or not self.tell_library_ms:
            return False
        if sparse.tells(self.tell_library_ms) or (self.sparse_enough is not None and sparse.working >= self.sparse_enough):
            return False
        return time.monotonic() - self._planned_at < SPARSE_MOST_S

    def _plan_stopped(self, timed: Timed, began: float) -> str | None:
        """Why the plan has the timing stop now, or None."""
        n, plan = len(timed.reported_ms), self.plan
        if plan.fixed is not None:
            return "fixed" if n >= plan.fixed else None
        if n < plan.min_trials:
            return None
        if n * timed.batch >= plan.max_trials:  # calls, a batch's each: max_trials is at least min_trials
            return "max_trials"
        if converged(timed.reported_ms):
            return "converged"
        return "time_budget" if time.monotonic() - began >= plan.budget_s else None


def busy_machine(candidate: TimingStats, reference: TimingStats) -> str | None:
    """Why a CPU run's speed and speedup are not an idle machine's, where processes outside the
    run kept BUSY_CORES or more busy while the candidate or the reference timing its speedup is
    against was timed. Beside two busy loops on the 2-core VM the main job's speedups came out
    0.9 to 3.2 times the idle machine's (a reference on two threads loses more to them than a
    one-thread kernel), and no kernel was flagged `timing_disagrees` for it. A window shorter
    than OthersCpu.MIN_SECONDS is not measured, and flags nothing."""
    shares = (candidate.others_cores, reference.others_cores)
    if max((share or 0.0 for share in shares), default=0.0) < BUSY_CORES:
        return None
    mine, theirs = ("unmeasured" if share is None else f"{share:.2f}" for share in shares)
    return (f"other processes kept {mine} cores busy while it was timed and {theirs} while the reference was: "
            f"its speed and speedup are not an idle machine's")


def lower_quartile(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=4, method="inclusive")[0] if len(samples) > 1 else samples[0]


def spread_of(samples: list[float]) -> float:
    """The median absolute deviation from the median (0 for no samples)."""
    if not samples:
        return 0.0
    middle = statistics.median(samples)
    return statistics.median(abs(x - middle) for x in samples)


def timing_bound(timed: Timed, reference_overhead_ms: list[float], reference_commit_ms: list[float],
                 device: str) -> TimingBound:
    """The bound a model's reported times are held to: the reference's per-call overhead just
    before and the part of it its outputs' commit took, this model's, and the slack (the
    reference's spread, at least scheduling jitter, and on the CPU what another process's overhead
    can differ by)."""
    # Jitter seen on the reference's quick calls, and on this model's own calls (a busy machine): a
    # worker that adds jitter of its own to widen the slack pays at least as much in its median.
    # The least slack is a timed command's, shared by the calls of a batch.
    overhead = statistics.median(reference_overhead_ms) if reference_overhead_ms else 0.0
    slack = max(MIN_SLACK_MS[device] / timed.batch, SLACK_SPREADS * spread_of(reference_overhead_ms),
                spread_of(timed.wall_ms), OVERHEAD_ERROR[device] * overhead)
    # Nine decimals: a batch's per-call values are microseconds, which six would cut to a few digits.
    return TimingBound(reference_overhead_ms=[round(x, 9) for x in reference_overhead_ms],
                       overhead_ms=[round(x, 9) for x in timed.overhead_ms], slack_ms=round(slack, 9),
                       reference_commit_ms=[round(x, 9) for x in reference_commit_ms],
                       commit_ms=[round(x, 9) for x in timed.commit_ms])


def harness_overhead_ms(bound: TimingBound) -> list[float]:
    """Per call of the model, the harness's own share of what the parent saw: the reference's
    median overhead, but of its outputs' commit no more than this call's commit took. A worker
    can write its outputs where the commit would put them as it computes them and skip the
    commit: a forged time then gained the commit the reference pays (up to 23x on the tiny relu,
    whose 64 KB commit costs about as much as its call)."""
    overhead = statistics.median(bound.reference_overhead_ms) if bound.reference_overhead_ms else 0.0
    if not bound.reference_commit_ms or not bound.commit_ms:  # no commit: a CPU run (or a record from before one was timed apart)
        return [overhead] * len(bound.overhead_ms)
    commit = statistics.median(bound.reference_commit_ms)
    return [overhead - commit + min(own, commit) for own in bound.commit_ms]


def vouched_median(reported_ms: list[float], bound: TimingBound, calls_per_command: int = 1) -> tuple[float, str | None]:
    """The median as far as the parent's clock vouches for it, and why it differs from the
    reported one when it does materially. Per call: no less than the parent's wall time less the
    harness's overhead (`harness_overhead_ms`) and the slack. Where the clock contradicts the
    reports by more than that on most calls (or, in batches of `calls_per_command`, by
    IMPLAUSIBLE_FACTOR), the slack's benefit of the doubt goes: the calls are timed by the clock, the wall time less the overhead (a worker
    claiming 1 ns per call otherwise kept the slack, 0.36 ms of a 0.7 ms relu's on an H100)."""
    slack, harness_ms = bound.slack_ms, harness_overhead_ms(bound)
    calls = list(zip(reported_ms, bound.overhead_ms, harness_ms))
    vouched_ms = [r + max(0.0, seen - own - slack) for r, seen, own in calls]
    clock_ms = [r + max(0.0, seen - own) for r, seen, own in calls]
    overhead = statistics.median(harness_ms)
    reported = statistics.median(reported_ms)
    # Whether the clock contradicts the reports is judged on its lower quartile: on a busy machine
    # some commands' wake-ups come milliseconds late (up to 6 ms a command beside two busy loops on
    # the 2-core VM), and in five samples they were now and then the median. A forged report is
    # contradicted on every call it forges; the speed is the median's all the same.
    vouched_low, clock_low = lower_quartile(vouched_ms), lower_quartile(clock_ms)
    within_slack = vouched_low <= reported * DISAGREE_FACTOR or vouched_low - reported <= slack
    implausible = calls_per_command > 1 and clock_low > reported * IMPLAUSIBLE_FACTOR and \
        clock_low - reported > MIN_SLACK_MS["cpu"] / calls_per_command
    if within_slack and not implausible:
        return max(statistics.median(vouched_ms), reported), None
    vouched = statistics.median(clock_ms)
    wall = statistics.median(r + seen for r, seen in zip(reported_ms, bound.overhead_ms))
    return vouched, (f"the worker reported {reported:.4g} ms per call; the harness's clock saw "
                     f"{wall:.4g} ms per call, of which {overhead:.3g} ms (±{slack:.2g}) is "
                     f"the harness's own overhead: the speedup uses {vouched:.4g} ms")
