"""Evaluate one candidate against its problem's reference.

Per problem, one reference worker (trusted code, still confined) computes expected outputs and
reference timings; per candidate, one candidate worker. They never time at the same time; for
each correctness trial both compute (side by side on a CPU run, in turn on a GPU) and the parent
compares the two outputs in place. Nothing that decides correctness is computed in the candidate's process; its
timing is held against the parent's clock, and checked on calls the parent picks afterwards.
Each step observes; judge/verdicts.py says what the observation means.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from ..builds.cache import BuildOutcome, key_lock
from ..records import (Candidate, CandidateKind, EvalConfig, Flag, Observations, Phase, Problem, Result, Status, Subject, Verdict)
from ..worker import processes
from ..worker.parent import REAL_TIME, Pace, Placement, Worker, WorkerStopped, gpu_context_pids
from ..worker.protocol import Command, ParamDigest, Reply, TensorRef
from ..worker.sampling import CpuSamples
from . import verdicts
from .compare import FusedComparison, compare_forms, compare_outputs
from .integrity import (fallback_evidence, fingerprint, hidden_library_evidence, hidden_operator_evidence,
                        library_to_tell_ms, mutated_inputs, outputs_shared, profiled_too_slow, untold_library)
from .provenance import custom_share, kernel_shares, no_custom_kernel_reason
from .reference import (TRIAL_SEED_OFFSET, Quiet, Recalibration, ReferenceRunner, no_quiet, release_device_cache,
                        surely_faster, worker_job)
from .timer import Call, ShortBatch, Timed, Timer, TimingPlan, busy_machine, timing_bound, timing_stats, vouched_median

T = TypeVar("T")  # what reference calls made with the candidate stopped measure
# A checked call's outputs read from a CPU worker's memory may span this many times the expected
# outputs' bytes, and this much more: views of a larger storage (q, k and v as chunks of one
# buffer's last dimension span about three times their bytes together); a reply describing more
# breaks the protocol (a 4 TB view must not make the parent read, or allocate, 4 TB).
LOCATED_SPAN_FACTOR, LOCATED_SPAN_EXTRA = 4, 1 << 20
LOG_TAIL_CHARS = 4000
SECOND_LOOK_CALLS = 6  # profiled calls more, when the first ones were slower than the profiler explains
TIMINGS = 2  # timings at most: a second where the parent's clock contradicted the first (`_time`)
# How long a stopped candidate's GPU work may take to end before the reference's recalibration
# (an honest candidate leaves none: its worker synchronizes the device before each reply), and
# how many recalibrations may find the GPU busy after them.
IDLE_WAIT_S = 0.1
RECALIBRATION_ATTEMPTS = 2
SPARE_COPIES = 4  # CPU: room made before timing for this many checked calls' outputs (5 calls check 2.5 on average)


def init_differs(reference: list[ParamDigest], candidate: list[ParamDigest]) -> bool:
    """Same parameter shapes in the same order, different values after the same seed."""
    same_layout = [p.shape for p in reference] == [p.shape for p in candidate] and bool(reference)
    return same_layout and any(r.sha256 != c.sha256 for r, c in zip(reference, candidate))


def candidate_text(candidate: Candidate) -> str:
    """The file as found (a transcript too), so compiler lines map to lines a person can open."""
    try:
        return Path(candidate.path).read_text(errors="replace")
    except OSError:
        return candidate.code or ""


def judged_by_build(subject: Subject, candidate: Candidate, config: EvalConfig, outcome: BuildOutcome,
                    placement: Placement = Placement()) -> Result | None:
    """The Result when the build ahead of evaluation already decides it, else None."""
    verdict = verdicts.of_build(outcome, config.device, candidate_text(candidate))
    if verdict is None:
        return None
    observed = Observations(phase=Phase.load, gpu=placement.gpu, build_s=round(outcome.seconds, 3),
                            build_cached=outcome.cached, protections=outcome.protections)
    return verdicts.result(subject, verdict, observed)


def _copied(tensors: list[torch.Tensor], spares: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Copies of `tensors`, into the last of `spares` when its shapes and dtypes fit them."""
    room = spares[-1] if spares else []
    if len(room) == len(tensors) and all(r.shape == t.shape and r.dtype == t.dtype and r.device == t.device
                                         for r, t in zip(room, tensors)):
        spares.pop()
        return [r.copy_(t) for r, t in zip(room, tensors)]
    return [t.clone() for t in tensors]


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def library_ms_per_call(samples: CpuSamples | None) -> float | None:
    """Sampled library CPU time a call, where sampling was not refused."""
    return None if samples is None else round(samples.library_ms_per_call, 6)


class CandidateRun:
    """One candidate's evaluation; produces exactly one Result."""

    def __init__(self, problem: Problem, candidate: Candidate, config: EvalConfig, key_dir: Path,
                 reference: ReferenceRunner, run_id: str, placement: Placement = Placement(),
                 build: BuildOutcome | None = None, worker: Worker | None = None, quiet: Quiet = no_quiet,
                 pace: Pace = REAL_TIME, later_of_problem: bool = True, fused: FusedComparison | None = None):
        """`worker`: one booted ahead (a lane's spare), or None to boot one (paced by `pace`).
        `later_of_problem`: whether candidates of the same problem may follow on this reference,
        which then keeps the expected outputs of its trials for them. `fused`: the lane's GPU
        comparison, None to compare in chunks."""
        self.problem, self.candidate, self.config, self.reference = problem, candidate, config, reference
        self.keep_expected, self.fused = later_of_problem, fused
        self.build_status = build.status if build is not None else None  # of its build ahead, if it had one
        self.key_dir, self.placement, self.worker, self.quiet, self.pace = key_dir, placement, worker, quiet, pace
        self.rng = random.SystemRandom()  # the seeds, and which calls are checked and profiled: never predictable
        self.subject = Subject.of(run_id, candidate, problem)
        self.observed = Observations(reference_timing=reference.timing, gpu=placement.gpu,
                                     reference_default_math_timing=reference.default_math_timing,
                                     build_s=round(build.seconds, 3) if build else None,
                                     build_cached=build.cached if build else False)

    def run(self) -> Result:
        """The Result; raises ReferenceFailed when the reference worker dies meanwhile."""
        began = time.monotonic()
        with self._phase(Phase.load):
            worker, loaded = self._start()
        self.observed.protections = worker.protections
        with worker:
            try:
                if isinstance(loaded, WorkerStopped):
                    raise loaded
                verdict = self._evaluate(worker, loaded)
            except WorkerStopped as stopped:
                verdict = verdicts.of_stop(stopped.stop)
            if verdict.status is not Status.ok:
                self.observed.log_tail = worker.log_tail(LOG_TAIL_CHARS) or None
            exiting = time.monotonic()
            if worker.compiled_triton:
                with key_lock(self.key_dir):
                    worker.keep_triton_cache(self.key_dir)
        release_device_cache(self.config.device)  # its timed outputs' copies, freed by now
        self.observed.phase_s["exit"] = round(time.monotonic() - exiting, 3)
        self.observed.elapsed_s = round(time.monotonic() - began, 3)
        return verdicts.result(self.subject, verdict, self.observed)

    @contextlib.contextmanager
    def _phase(self, phase: Phase):
        """Enter `phase`, and record its wall time however it ends."""
        self.observed.phase = phase
        began = time.monotonic()
        try:
            yield
        finally:
            self.observed.phase_s[phase.value] = round(time.monotonic() - began, 3)

    def reference_died(self, reason: str) -> Result:
        """The reference worker died while this candidate ran (its evaluation was cut short)."""
        return verdicts.result(self.subject, verdicts.reference_died(reason), self.observed)

    def harness_failed(self, trace: str) -> Result:
        """The harness raised while judging this candidate (`trace`, the traceback)."""
        return verdicts.result(self.subject, verdicts.harness_failed(trace), self.observed)

    def _start(self) -> tuple[Worker, Reply | WorkerStopped]:
        """Give the worker its job and wait for its import (which compiles, or finds the build up
        to date) under the key's lock, so no other run builds in that dir meanwhile."""
        with key_lock(self.key_dir), contextlib.ExitStack() as unless_started:
            worker = self.worker or Worker(self.placement, role="candidate", device=self.config.device,
                                           timeout_s=self.config.timeout_s, key_dir=self.key_dir, pace=self.pace)
            unless_started.enter_context(worker)  # closed here if handing it its job raises
            worker.start(worker_job("candidate", self.problem, self.config), self.candidate.code, self.problem.source,
                         self.key_dir)
            try:
                loaded: Reply | WorkerStopped = worker.reply("load and build", self._load_deadline_s())
            except WorkerStopped as stopped:
                loaded = stopped
            unless_started.pop_all()  # run() closes it from here on
            return worker, loaded

    def _load_deadline_s(self) -> float:
        """--build-timeout only where its import is its build (an extension nobody tried to build
        ahead); otherwise a phase's --timeout, a build ahead that was deferred included (its
        import raised in the build worker): a candidate that slept at import once held its lane
        for the whole build timeout, and one that raises in the build worker and sleeps here
        would again. An import that compiles after all has --timeout for it (300 s by default)."""
        compiles = self.candidate.kind.built_ahead and self.build_status is None
        return self.config.build_timeout_s if compiles else self.config.timeout_s

    def _verdict_of(self, reply: Reply, worker: Worker) -> Verdict | None:
        if reply.ok:
            return None
        return verdicts.of_reply(reply, worker.log_head(), self.config.device, candidate_text(self.candidate))

    def _evaluate(self, worker: Worker, loaded: Reply) -> Verdict:
        verdict = self._verdict_of(loaded, worker)
        if verdict:
            return verdict
        if init_differs(self.reference.params, loaded.params or []):
            self.observed.note(Flag.init_differs)
        timed = Timed()
        steps = ((Phase.correctness, lambda: self._check_trials(worker)),
                 (Phase.timing, lambda: self._time(worker, timed)),
                 (Phase.profile, lambda: self._check_profiles(worker, timed)),
                 (Phase.shapes, lambda: self._check_other_shapes(worker)))
        for phase, step in steps:
            with self._phase(phase):
                verdict = step()
            if verdict:
                return verdict
        self.observed.phase = None
        return verdicts.passed()

    def _note_threads(self, count: int) -> None:
        if count:
            self.observed.note(Flag.threads_left_running)

    def _trial(self, worker: Worker, seed: int, sizes: dict[str, int] | None, phase: str):
        """(the candidate's failed reply's verdict, None) or (None, (check, changed inputs,
        (the reference's output fingerprint, the candidate's))): the reference's outputs (kept
        for every candidate), then the candidate's, compared in place. On a CPU run the candidate
        starts first and the reference computes beside it (half the wall time on two cores; not
        a timed call); on a GPU they would share the device's memory, so they take turns."""
        command = Command(op="trial", seed=seed, sizes=sizes)
        beside = self.config.device == "cpu"
        if beside:
            worker.send(command, phase)
        with self.reference.expected(seed, sizes, keep=self.keep_expected) as (expected, expected_inputs):
            if phase == "correctness":
                self.reference.watch_degenerate(seed, expected)
            reply = worker.answer(command, phase) if beside else worker.request(command, phase)
            verdict = self._verdict_of(reply, worker)
            if verdict:
                return verdict, None
            self._note_threads(reply.threads_alive)
            with worker.reading(reply.outputs, phase) as actual, worker.reading(reply.inputs, phase) as actual_inputs:
                # Outputs of another shape are a mismatch already; a fingerprint would read all of them
                # (a stride-0 view of 2**44 elements is a few bytes to describe, terabytes to read).
                shaped = [t.shape for t in actual] == [t.shape for t in expected]
                check = compare_forms(self.reference.output_form, reply.form, len(actual)) or \
                    compare_outputs(expected, actual, self.config.tolerance_for(self.problem), self.fused)
                return None, (check,
                              mutated_inputs(expected_inputs, actual_inputs),
                              (fingerprint(expected), fingerprint(actual) if shaped else None))

    def _check_trials(self, worker: Worker) -> Verdict | None:
        seeds = [self.config.seed + TRIAL_SEED_OFFSET + trial for trial in range(self.config.correctness_trials)]
        tolerance = self.config.tolerance_for(self.problem)
        fingerprints = []
        for trial, seed in enumerate(seeds):
            # Fresh input values every trial: a stale buffer or a cached answer cannot pass twice.
            verdict, found = self._trial(worker, seed, None, "correctness")
            if verdict:
                return verdict
            check, changed, pair = found
            fingerprints.append(pair)
            if not changed:
                # An infinite one (NaN or Inf where the reference is finite) is recorded as none: JSON
                # has no infinity, and the error line says what it was.
                self.observed.max_abs_err = finite_or_none(max(self.observed.max_abs_err or 0.0, check.max_abs_err or 0.0))
                self.observed.max_rel_err = finite_or_none(max(self.observed.max_rel_err or 0.0, check.max_rel_err or 0.0))
            verdict = verdicts.of_trial(check, changed, trial, self.config.correctness_trials,
                                        Flag.init_differs in self.observed.flags, tolerance.atol)
            if verdict:
                return verdict
            self.observed.trials_passed = trial + 1
        degenerate = self.reference.degenerate(seeds)
        if degenerate:
            self.observed.note(Flag.degenerate_problem, f"the problem is degenerate: {'; '.join(degenerate)}")
        return verdicts.of_sensitivity([r for r, _ in fingerprints], [c for _, c in fingerprints])

    def _recalibrated(self, worker: Worker, batch: int) -> Recalibration | Verdict:
        """The reference's recalibration at `batch` calls a command (the per-call overhead the
        candidate's timing bound subtracts), with nothing of the candidate's running
        (`_reference_alone`)."""
        return self._reference_alone(worker, "the reference's recalibration", lambda: self.reference.recalibrate(batch))

    def _reference_alone(self, worker: Worker, purpose: str, measure: Callable[[], T]) -> T | Verdict:
        """`measure` (reference calls) with nothing of the candidate's running: its whole tree is
        stopped (processes it left spinning would slow the reference's calls; on a CPU run the
        quiet window around them stops it too, but not on Ray or through the API), and on a GPU
        the device must be idle before and after: a kernel it queued runs on when its processes
        stop, time-sliced with the reference's calls (forged_background.py raised the reference's
        overhead from 0.7 to 7.4 ms on an H100). A GPU still busy is someone else's (`skipped`)
        or, where only the run holds it, the candidate's (`rejected`)."""
        with worker.stopped_all(purpose):
            if self.config.device == "cpu":
                return measure()
            for _ in range(RECALIBRATION_ATTEMPTS):
                if not self.reference.device_idle_within(IDLE_WAIT_S):
                    return verdicts.gpu_shared() if self._outsiders_on_gpu(worker) else \
                        verdicts.busy_while_stopped(IDLE_WAIT_S)
                measured = measure()
                if self.reference.device_idle_within(0):
                    return measured
            # Idle before, busy after, every time: not the candidate's work, which cannot start
            # while its processes are stopped; someone else's, or the reference's own hiccups.
            return verdicts.gpu_shared() if self._outsiders_on_gpu(worker) else measured

    def _outsiders_on_gpu(self, worker: Worker) -> bool:
        """Whether a process other than the run's own (this one, the reference's tree, the
        candidate's) holds a context on the lane's GPU, or that cannot be told."""
        holders = gpu_context_pids(self.placement.gpu)
        ours = {os.getpid(), *processes.tree(self.reference.worker.pid), *processes.tree(worker.pid)}
        # This process holds one: where the driver's list lacks it (a PID namespace of a
        # container), it names no one reliably.
        return holders is None or os.getpid() not in holders or bool(holders - ours)

    def _spare_copies(self) -> list[list[torch.Tensor]]:
        """On the CPU, room for the first checked calls' outputs, made (its pages touched) before
        the timing window: a 256 MB copy the parent made fresh between two timed calls made the
        candidate's next call 3 to 5 times slower on the 2-core VM, whose freed memory comes back
        from its host slowly (slow calls in 7 of 8 runs of four big problems with fresh copies,
        none in 3 runs with the room made first)."""
        size = self.reference.output_bytes
        if self.config.device != "cpu" or not size:
            return []
        count = min(SPARE_COPIES, self.reference.budget_left // size)
        return [[t.zero_() for t in self.reference.output_like()] for _ in range(count)]

    def _copy_checked_call(self, worker: Worker, copies: list, spares: list[list[torch.Tensor]], shared: list[bool]):
        """For the calls of a timed command the parent chose after their outputs were described:
        their fed inputs must be as forward should leave them (`_fed_inputs_verdict`); copy their
        outputs out now (the worker cannot change them afterwards; on the CPU, read from its
        memory with its whole tree stopped), into `spares` while they last, to compare with the
        reference's once the timed calls are over. Past the memory budget, compare at once instead.
        `shared` gets an entry for each command whose checked calls returned outputs in the same
        memory."""
        budget = self.reference.budget_left  # one budget for everything the parent keeps on the device

        def check(calls: list[Call]) -> Verdict | None:
            if outputs_shared([call.outputs for call in calls]):
                shared.append(True)  # a wrong output among them is then that (`verdicts.of_checked_timed_calls`)
            if all(call.fed is None for call in calls):
                return read(calls)
            # Fed inputs and outputs read in one stop: a worker resumed between the two could tell
            # from its caches which calls were read first, and mend what is read next.
            with worker.stopped_all("its checked calls to be read during timing"):
                return read(calls)

        def read(calls: list[Call]) -> Verdict | None:
            fed = [(call.seed, call.fed) for call in calls if call.fed is not None]
            if fed and (verdict := self._fed_inputs_verdict(worker, fed, len(copies) + 1)):
                return verdict
            limit = len(calls) * (LOCATED_SPAN_FACTOR * self.reference.output_bytes + LOCATED_SPAN_EXTRA)
            with worker.reading([ref for call in calls for ref in call.outputs], "timing", located_limit=limit) as actual:
                start = 0
                for call in calls:
                    outputs, start = actual[start:start + len(call.outputs)], start + len(call.outputs)
                    if sum(t.nbytes for c in copies for t in c[1]) + sum(t.nbytes for t in outputs) <= budget:
                        copies.append((call.seed, _copied(outputs, spares)))
                    elif objection := self._compare_checked_call(call.seed, outputs, len(copies) + 1):
                        return objection
                if actual and actual[0].is_cuda:
                    # Done copying before the mapping closes and before the next timed call: a
                    # copy still running on the GPU would slow that call and be blamed on it.
                    torch.cuda.synchronize(actual[0].device)
            return None

        return check

    def _fed_inputs_verdict(self, worker: Worker, calls: list[tuple[int, list[TensorRef]]], index: int) -> Verdict | None:
        """On a CPU run a timed call's inputs are views of what the parent fed, and a forward that
        writes into them spares itself an output's allocation (3.5x for an in-place relu on the
        2-core VM, where the correctness trials saw it leave them alone): a checked call's must
        come back unchanged, or changed as the reference's forward changes them (a reference
        trial run then, between timed calls: only where they changed at all)."""
        for (seed, _), left in zip(calls, self.reference.fed_inputs_left(worker, calls)):
            if left is None:
                continue
            with self.reference.expected(seed) as (_, expected_inputs):
                verdict = verdicts.of_timed_inputs(mutated_inputs(expected_inputs, left), index)
            if verdict:
                return verdict
        return None

    def _compare_checked_call(self, seed: int, actual: list, index: int) -> Verdict | None:
        with self.reference.expected(seed) as (expected, _):
            found = compare_outputs(expected, actual, self.config.tolerance_for(self.problem), self.fused)
        return verdicts.of_timed_sample(found, index)

    def _timer(self, worker: Worker, batch: int) -> Timer:
        drain = (lambda: self.reference.busy_ms(IDLE_WAIT_S)) if self.config.device == "cuda" else None
        return Timer(worker, TimingPlan.of(self.config), self.rng, quiet=lambda: self.quiet([worker.pid, self.reference.worker.pid]),
                     feed=self.reference.feeding(worker), batch=batch, cap=self.reference.batch_cap, insist=True, drain=drain,
                     spoil=True, sample=self.config.device == "cpu", sparse=self.config.device == "cpu",
                     tell_library_ms=library_to_tell_ms(self.reference.timed.sparse_samples))

    def _time(self, worker: Worker, timed: Timed) -> Verdict | None:
        """Its timing, held to the parent's clock. One the clock contradicts is measured once more,
        warm-up and recalibration included, and the second stands: a forged time is contradicted
        every time, an honest one only where the machine's scheduling happened to delay its
        commands (beside two busy loops on the 2-core VM, 4 of a 12 us C++ relu's 5 commands came
        a scheduler slice late, the reference's recalibration just before none: flagged in 1 of 5
        runs)."""
        spares = self._spare_copies()  # before the reference's recalibration and the warm-up, which absorb its cost
        for _ in range(TIMINGS):
            measured = self._measured(worker, spares)
            if isinstance(measured, Verdict):
                return measured
            own, recalibration = measured
            bound = timing_bound(own, recalibration.overhead_ms, recalibration.commit_ms, self.config.device)
            vouched, disagreement = vouched_median(own.reported_ms, bound, own.batch)
            if disagreement is None:
                break
        timed.__dict__.update(own.__dict__)
        self._note_threads(own.threads_alive)
        self.observed.timing = timing_stats(own.reported_ms, self.reference.clock, own.stopped, own.batch,
                                            own.others_cores)
        self.observed.wall_ms_per_call = round(statistics.median(own.wall_ms), 6)
        self.observed.reference_wall_ms_per_call = round(statistics.median(self.reference.timed.wall_ms), 6)
        self.observed.library_cpu_ms_per_call = library_ms_per_call(own.cpu_samples)
        self.observed.sparse_library_cpu_ms_per_call = library_ms_per_call(own.sparse_samples)
        self.observed.reference_library_cpu_ms_per_call = library_ms_per_call(self.reference.timed.cpu_samples)
        self.observed.reference_sparse_library_cpu_ms_per_call = library_ms_per_call(self.reference.timed.sparse_samples)
        self.observed.reference_recalibrated_timing = surely_faster(self.reference.timing, recalibration.timing)
        self.observed.timing_bound = bound
        if disagreement:
            self.observed.note(Flag.timing_disagrees, disagreement)
        if busy := busy_machine(self.observed.timing, self.observed.reference_recalibrated_timing or self.reference.timing):
            self.observed.note(Flag.busy_machine, busy)
        self.observed.vouched_median_ms = vouched
        if self.reference.floor:
            self.observed.floor_fraction = round(self.reference.floor.floor_ms / vouched, 4) if vouched > 0 else None
        return verdicts.of_speed(vouched, self.reference.floor)

    def _measured(self, worker: Worker, spares: list[list[torch.Tensor]]) -> tuple[Timed, Recalibration] | Verdict:
        """One timing of the candidate, its checked calls compared, and the reference's
        recalibration it is held to; or the verdict that ended it."""
        timer = self._timer(worker, self.reference.batch)
        # Where the reference's calls are timed one to a command (calls of 20 ms or more, or too large to batch), it is
        # recalibrated before the candidate's warm-up, which then comes right before its first
        # timed call: on the CPU, memory a worker freed comes back slowly after a pause (0.38 s
        # instead of 0.08 s for a relu's first call after the recalibration, on a VM that hands
        # freed memory to its host). Otherwise (and where the candidate's batch, sized after its
        # warm-up, turns out larger) it is recalibrated at the candidate's batch: a command's
        # overhead is shared by its calls, and a batch's first calls absorb the pause (a candidate
        # timed one call to a command after all warms up again, with one call).
        recalibration = self._recalibrated(worker, 1) if self.reference.batch == 1 else None
        if isinstance(recalibration, Verdict):
            return recalibration
        verdict = self._verdict_of(timer.warm_up(size=True), worker)
        if verdict:
            return verdict
        if recalibration is None or timer.batch != 1:
            if isinstance(recalibration := self._recalibrated(worker, timer.batch), Verdict):
                return recalibration
            if timer.batch == 1 and (verdict := self._verdict_of(timer.warm_up(calls=1), worker)):
                return verdict
        copies: list = []
        shared: list[bool] = []
        measured, objection = timer.run(check=self._copy_checked_call(worker, copies, spares, shared))
        for retime in range(2):
            if not isinstance(objection, ShortBatch):
                break
            # Slower while its batch was sized than now: timed again at the batch its short one
            # implies, then (short again) at the cap; the checked calls so far stay checked.
            timer.batch = objection.implied(timer.cap) if retime == 0 else timer.cap
            if isinstance(recalibration := self._recalibrated(worker, timer.batch), Verdict):
                return recalibration
            measured, objection = timer.run(check=self._copy_checked_call(worker, copies, spares, shared))
        if isinstance(objection, Reply):
            return self._verdict_of(objection, worker)
        for index, (seed, outputs) in enumerate(copies, start=1):
            objection = objection or self._compare_checked_call(seed, outputs, index)
        if objection is not None:
            return verdicts.of_checked_timed_calls(objection, bool(shared))
        return measured, recalibration

    def _check_profiles(self, worker: Worker, timed: Timed) -> Verdict | None:
        """The profiled calls (chosen at random among the timed ones): no fallback to PyTorch's
        own kernels, and no slower than the others (a candidate that tells the profiler apart).
        Slow ones get a second look first: a busy moment slows a call or two, a candidate that
        runs other code when watched is slow on every one."""
        reference_ops = len(self.reference.profile.ops) if self.reference.profile else 0
        if profiled_too_slow(timed, self.reference.timed, reference_ops, self.config.device):
            failed = self._timer(worker, timed.batch).profile_more(timed, SECOND_LOOK_CALLS)
            if failed is not None:
                return self._verdict_of(failed, worker)
        slow = self._profiled_too_slow(worker, timed, reference_ops)
        if slow is not None:
            return slow
        evidence, median = hidden_operator_evidence(self.candidate.code or "", self.reference.profile), \
            self.observed.timing.median_ms
        self._note_provenance(timed.profiles[0] if timed.profiles else None, median)
        for profile in timed.profiles:
            found = fallback_evidence(self.reference.profile, profile, median, self.reference.timing.median_ms,
                                      own_code=self.candidate.kind is not CandidateKind.python,
                                      degenerate=Flag.degenerate_problem in self.observed.flags,
                                      output_elements=self.reference.output_elements)
            evidence += [e for e in found if e not in evidence]
        if Flag.degenerate_problem not in self.observed.flags:
            # Sampled closely, or sparsely on the recorded calls (a candidate that notices the first
            # does its own work there), each held to the reference's sampled alike.
            reference = self.reference.timed
            untold = untold_library(timed.sampling_refusal, ((timed.cpu_samples, reference.cpu_samples),
                                                             (timed.sparse_samples, reference.sparse_samples)))
            if untold is not None and not evidence:
                return verdicts.unsampled(untold)
            evidence += hidden_library_evidence(timed.cpu_samples, timed.profiles, reference.cpu_samples) or \
                hidden_library_evidence(timed.sparse_samples, timed.profiles, reference.sparse_samples)
        return verdicts.of_fallback(evidence)

    def _profiled_too_slow(self, worker: Worker, timed: Timed, reference_ops: int) -> Verdict | None:
        """Its profiled calls slower than the profiler explains, both by what the profiler cost
        the reference when it was timed and by what it costs it now: that cost moves with the
        machine (on two busy H100s an honest Triton softmax paid 4.3 ms a profiled call, eight
        times over, where the reference had paid 1.8 ms when it was timed). Now is measured with
        nothing of the candidate's running (`_reference_alone`)."""
        if profiled_too_slow(timed, self.reference.timed, reference_ops, self.config.device) is None:
            return None
        now = self._reference_alone(worker, "the reference's profiled calls",
                                    lambda: self.reference.profiled_now(SECOND_LOOK_CALLS))
        if isinstance(now, Verdict):
            return now
        slow = profiled_too_slow(timed, now, reference_ops, self.config.device)
        return verdicts.of_profiled_slowdown(slow) if slow else None

    def _note_provenance(self, profile, median_ms: float) -> None:
        """Which kernels its forward ran and whose they are; flagged when none is its own."""
        shares = kernel_shares(profile, self.candidate.code or "") if profile else []
        self.observed.kernels, self.observed.custom_kernel_share = shares, custom_share(shares)
        reason = no_custom_kernel_reason(self.candidate.kind, shares, profile, median_ms)
        if reason:
            self.observed.note(Flag.no_custom_kernel, reason)

    def _check_other_shapes(self, worker: Worker) -> Verdict | None:
        """Correct at the official shape only: flagged, or a mismatch under --strict-shapes."""
        for sizes in self.reference.alt_sizes:
            try:
                verdict, found = self._trial(worker, self.config.seed + TRIAL_SEED_OFFSET, sizes, "shapes")
                problem = None if found is None or found[0].passed else found[0].reason
                if verdict:
                    problem = verdict.error
            except WorkerStopped as stopped:
                problem = stopped.stop.error
            if problem is not None:
                what = ", ".join(f"{k}={v}" for k, v in sizes.items())
                self.observed.note(Flag.shape_specialized, None if self.config.strict_shapes else f"at {what}: {problem}")
                return verdicts.of_other_shapes(what, problem, self.config.strict_shapes)
        return None

