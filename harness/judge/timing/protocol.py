"""The timing phase, driven by the parent, the same on every device: `timed` commands of one call
each (of a batch of calls for quick ones, see BATCH_MS), each call on inputs made from a seed the
worker learns only with that command. The parent decides in secret which calls it verifies
(after their command's outputs are described; the reference computes the same seeds) and which
commands it profiles (a profiled command says so only as it arrives); it times every command with
its own clock too (bound.py holds the reports to it). Timing is adaptive: it stops when the
median's 95% interval is within ±1%, or the model's time budget is spent, never before
`min_trials` samples nor after `max_trials` calls (a sample of a batch is that many calls; a fixed
count of samples with --trials N). A checked call's outputs are copied out at once (the worker
cannot change them afterwards) and compared with the reference's after the last call, so the
timed calls follow one another without the reference's work in between. The worker learns that a
call was checked only once its outputs are copied (or compared, past the memory budget).

How each step is measured on a device (how outputs are handed over, what is held around the
calls, what else is gathered) is the device's Measurement (measurement.py).

A paired timing (`pair`, where the device pairs: a GPU) follows each recorded command with one of
the reference's, the candidate's processes stopped: drift of the machine between the two lands in
neither's ratio, and it is the ratios' median interval that must come within ±1% (a GPU's clocks
and a process's host path had moved sub-millisecond speedups 4% to 27% between two runs timed
minutes apart, docs/performance.md)."""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from ...records import EvalConfig
from ...worker.protocol import Command, Reply, TensorRef
from .measurement import Measurement
from .stats import converged
from .timed import Timed

# The chance that a one-call command's outputs are checked, in the first EARLY_CALLS commands and
# after them (a batch is always verified, see `_run`).
VERIFY_EARLY, VERIFY_LATE, EARLY_CALLS = 0.5, 0.2, 20
PROFILE_CHANCE, MIN_PROFILED = 0.1, 2
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


Check = Callable[[list[Call]], object]  # a verified command's chosen calls: an objection or None
Pair = Callable[[], object]  # a reference command paired with the last recorded one: its time a call (float), or an objection


class TimingPlan(BaseModel):
    """How long a model is timed (from EvalConfig)."""

    warmup: int
    fixed: int | None  # --trials N; None: adaptive
    min_trials: int
    max_trials: int
    budget_s: float

    @classmethod
    def of(cls, config: EvalConfig) -> TimingPlan:
        return cls(warmup=config.warmup, fixed=config.trials, min_trials=config.min_trials,
                   max_trials=config.max_trials, budget_s=config.time_budget_s)


class Timer:
    """Drives one worker's timing phase. `check(calls)` is asked about the calls chosen for
    verification (it returns a reason to stop, or None, once it has copied or compared their
    outputs); nothing of the choice reaches the worker before that."""

    def __init__(self, measure: Measurement, plan: TimingPlan, rng: random.Random, phase: str = "timing",
                 batch: int = 1, cap: int = 1, insist: bool = False, pair: Pair | None = None):
        """`measure`: the device's measurement of this worker; `batch`: calls per timed command, at
        most `cap` (`warm_up` sizes it when `cap` allows more than one); `insist`: a batch too short
        for the bound stops the timing (`ShortBatch`); `pair`: each recorded command is followed by
        the reference's (`Timed.paired_ms`)."""
        self.measure, self.worker, self.plan, self.rng, self.phase = measure, measure.worker, plan, rng, phase
        self.batch, self.cap, self.insist, self.pair = batch, cap, insist, pair
        self._planned_at = 0.0  # when the plan of the last `run` had its timing stop

    def seed(self) -> int:
        return self.rng.getrandbits(62)

    def warm_up(self, size: bool = False, calls: int | None = None) -> Reply:
        """Untimed calls (the plan's warm-up, or `calls`); with `size`, then the batch sized
        (`size_batch`), with the run's other workers quiet as for timed calls (a batch sized
        while they ran came out too small for the quiet window). The failed reply, if one failed."""
        seeds = [self.seed() for _ in range(self.plan.warmup if calls is None else calls)]
        fed = self.measure.inputs(seeds[-1:]) if seeds else None
        warm = self.worker.request(Command(op="warmup", seeds=seeds, fed=fed), self.phase)
        if not warm.ok or not size or self.cap == 1:
            return warm
        with self.measure.quiet():
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
                return self.measure.let_go(self.phase)
            calls = min(self.cap, calls * RAMP_FACTOR)

    def run(self, check: Check | None = None, profiled: int = MIN_PROFILED) -> tuple[Timed, object]:
        """(what was measured, the first thing `check` objected to, or the failed reply, or None)."""
        timed = Timed(batch=self.batch, profiled_most=self.measure.profiled_most)
        with self.measure.window(timed):
            failed = self._run(timed, check, profiled)
        if failed is None and not (released := self.measure.let_go(self.phase)).ok:
            return timed, released
        return timed, failed

    def _run(self, timed: Timed, check: Check | None, profiled: int) -> object:
        began, commands = time.monotonic(), 0
        profile_at, sample_at = self._special_commands(profiled, self.measure.sampled_commands())
        if self.batch > 1:
            # A batch's first command after a pause (a recalibration, a sizing) paid twice the
            # commit of the next ones (memory handed back slowly, a commit buffer grown): it is not
            # recorded, or an honest candidate's first overhead alone got it `timing_disagrees`.
            primed, _, _ = self._call(None, [self.seed() for _ in range(self.batch)], profile=False)
            if not primed.ok:
                return primed
        while not self._done(timed, began, len(profile_at)):
            profiled = commands in profile_at
            sampled = self.measure.samples_next(commands in sample_at, profiled)
            seeds = [self.seed() for _ in range(timed.profiled_batch if profiled else self.batch)]
            # A batch is verified every time (some of its calls, `Measurement.checked_calls`):
            # batched timings stop after a handful of commands, which a coin would leave all
            # unchecked now and then.
            verify = check is not None and (len(seeds) > 1 or
                                            self.rng.random() < (VERIFY_EARLY if commands < EARLY_CALLS else VERIFY_LATE))
            with contextlib.ExitStack() as held:  # a verified command's worker, held from its reply through the check
                reply, fed, wall_ms = self._call(timed, seeds, profile=profiled, sampled=sampled,
                                                 held=held if verify else None)
                commands += 1
                if not reply.ok:
                    return reply
                if verify and (drained_ms := self.measure.drained_ms()):
                    # Work a worker queued after its last call's end runs while the parent reads the
                    # checked outputs, off the clock (an unverified command's is waited for inside the
                    # next one): the time the device stays busy with it is this command's.
                    (timed.profiled_wall_ms if profiled else timed.wall_ms)[-1] += drained_ms / len(seeds)
                # The outputs are copied before the worker gets another command (its profile's included).
                objection = check(self._chosen(seeds, reply, fed)) if verify else None
            if objection is not None:
                return objection
            if profiled and not (summary := self._profile(timed)).ok:
                return summary
            if verify and not (settled := self.measure.settle(self.phase)).ok:
                return settled
            if self.insist and not profiled and self.batch < self.cap and wall_ms < BATCH_MS / 2:
                return ShortBatch(self.batch, wall_ms)
            if self.pair is not None and not profiled and not sampled:
                if not isinstance(paired := self.pair(), float):
                    return paired
                timed.paired_ms.append(paired)
        return None

    def command(self, timed: Timed) -> Reply:
        """One recorded command of the timer's batch, by itself, its outputs let go after it (a
        reference's command paired with a candidate's)."""
        reply, _, _ = self._call(timed, [self.seed() for _ in range(self.batch)], profile=False)
        released = self.measure.let_go(self.phase)
        return reply if not reply.ok or released.ok else released

    def _chosen(self, seeds: list[int], reply: Reply, fed: list[TensorRef] | None) -> list[Call]:
        """The calls of a verified command whose outputs are checked, chosen now, in secret."""
        calls = len(seeds)
        return [Call(seeds[index], self.measure.outputs_of(reply, index, calls),
                     [ref.row(index) for ref in fed] if fed is not None else None)
                for index in sorted(self.rng.sample(range(calls), self.measure.checked_calls(calls)))]

    def profile_more(self, timed: Timed, count: int) -> Reply | None:
        """`count` more profiled calls into `timed` (a second look, when the first ones were slow);
        the failed reply, if one fails."""
        with self.measure.quiet():
            for _ in range(count):
                reply, _, _ = self._call(timed, [self.seed() for _ in range(timed.profiled_batch)], profile=True)
                if not reply.ok:
                    return reply
                if not (summary := self._profile(timed)).ok:
                    return summary
        released = self.measure.let_go(self.phase)
        return None if released.ok else released

    def _profile(self, timed: Timed) -> Reply:
        """The last profiled call's profile, asked for after the clock stopped: reading the
        profiler's events is no call's cost (worker/child.py)."""
        summary = self.worker.request(Command(op="profile"), self.phase)
        if summary.ok:
            timed.profiles.append(summary.profile.per_call(timed.profiled_batch))
        return summary

    def _call(self, timed: Timed | None, seeds: list[int], profile: bool, sampled: bool = False,
              held: contextlib.ExitStack | None = None) -> tuple[Reply, list[TensorRef] | None, float]:
        """One timed command, a call per seed: recorded per call in `timed` (None: not recorded)
        if it succeeded; the reply, where its inputs were fed (if they were), and its time by the
        parent's clock, the hand-over of its outputs included (`Measurement.handed_over`), and the
        work the worker did after its reply, before it was stopped (`Measurement.stopped_at_reply`,
        held until `held` closes, where given). Fed inputs go with no seeds. A `sampled` command's
        time is not recorded."""
        if not (released := self.measure.let_go(self.phase)).ok:
            return released, None, 0.0
        fed, calls = self.measure.inputs(seeds), len(seeds)
        command = Command(op="timed", seeds=[] if fed is not None else seeds, calls=calls, fed=fed, profile=profile,
                          locate=self.measure.locates)
        with contextlib.ExitStack() as own:
            with self.measure.watching(calls, profile, sampled):
                sent = time.perf_counter()
                reply = self.worker.request(command, self.phase)
                replied = time.perf_counter()
                # First of all, the worker stopped: what the measurement does next (closing its
                # watch) takes long enough for a candidate's threads to finish unobserved what
                # the reply pretends is done.
                after_ms = (held or own).enter_context(self.measure.stopped_at_reply(self.phase)) if reply.ok else 0.0
            # The wall ends at the reply; its outputs' hand-over and the work after it are added.
            reply, handover_ms = self.measure.handed_over(reply, calls, self.phase)
        wall_ms = (replied - sent) * 1000 + handover_ms + after_ms
        if not reply.ok or timed is None:
            return reply, fed, wall_ms
        timed.threads_alive = max(timed.threads_alive, reply.threads_alive)
        if sampled:
            self.measure.unrecorded(timed, wall_ms)
        elif profile:  # its profile is asked for next (`_profile`)
            timed.profiled_wall_ms.append(wall_ms / calls)
        else:
            timed.reported_ms.append(reply.elapsed_ms / calls)
            timed.wall_ms.append(wall_ms / calls)
            if reply.host_ms is not None:
                timed.host_ms.append(reply.host_ms / calls)
            if not self.measure.locates:
                timed.commit_ms.append(handover_ms / calls)
        return reply, fed, wall_ms

    def _special_commands(self, profiled: int, sampled: int) -> tuple[set[int], set[int]]:
        """Which commands are profiled and which sampled: so many at random among the first
        commands every timing makes."""
        first = min(self.plan.min_trials, self.plan.fixed or self.plan.min_trials) + profiled + sampled
        chosen = self.rng.sample(range(first), profiled + sampled)
        return set(chosen[:profiled]), set(chosen[profiled:])

    def _done(self, timed: Timed, began: float, profiles_due: int) -> bool:
        # Profiled and sampled commands are among the first ones: never skipped.
        if len(timed.profiles) < profiles_due or self.measure.wants_more():
            return False
        if (stopped := self._plan_stopped(timed, began)) is None:
            return False
        if timed.stopped != "sampling":
            timed.stopped, self._planned_at = stopped, time.monotonic()
        if self.measure.goes_on(self._planned_at):
            timed.stopped = "sampling"
            return False
        return True

    def _plan_stopped(self, timed: Timed, began: float) -> str | None:
        """Why the plan has the timing stop now, or None."""
        n, plan = len(timed.reported_ms), self.plan
        if plan.fixed is not None:
            return "fixed" if n >= plan.fixed else None
        if n < plan.min_trials:
            return None
        if n * timed.batch >= plan.max_trials:  # calls, a batch's each: max_trials is at least min_trials
            return "max_trials"
        if converged(timed.paired_ratios if self.pair is not None else timed.reported_ms):
            return "converged"
        return "time_budget" if time.monotonic() - began >= plan.budget_s else None
