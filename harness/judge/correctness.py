"""A candidate's correctness: its outputs against the reference's on the correctness trials (fresh
input values every trial: a stale buffer or a cached answer cannot pass twice), then at the
problem's other sizes. Both models compute in their own workers; the parent compares the outputs
in place."""

from __future__ import annotations

import math

from ..records import CheckResult, Verdict
from ..worker.parent import WorkerStopped
from ..worker.protocol import Command
from . import verdicts
from .checking import Moment, Replied, Shapes, Trial, Trials
from .checks.init_differs import FLAG as INIT_DIFFERS
from .checks.input_insensitive import fingerprint
from .checks.input_mutation import mutated_inputs
from .compare import compare_forms, compare_outputs
from .evaluation import Evaluation
from .reference import TRIAL_SEED_OFFSET, trial_seeds


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def trial(ev: Evaluation, seed: int, sizes: dict[str, int] | None, phase: str):
    """(the candidate's failed reply's verdict, None) or (None, (comparison, changed inputs, the
    reference's output fingerprint, the candidate's)): the reference's
    outputs (kept for every candidate), then the candidate's, compared in place. Where the device
    has them beside each other (a CPU run) the candidate starts first and the reference computes
    meanwhile (half the wall time on two cores; not a timed call); on a GPU they would share the
    device's memory, so they take turns."""
    command, worker = Command(op="trial", seed=seed, sizes=sizes), ev.worker
    beside = ev.device.trials_beside
    if beside:
        worker.send(command, phase)
    with ev.reference.expected(seed, sizes, keep=ev.keep_expected) as (expected, expected_inputs):
        if phase == "correctness":
            ev.reference.watch_degenerate(seed, expected)
        reply = worker.answer(command, phase) if beside else worker.request(command, phase)
        verdict = ev.verdict_of(reply)
        if verdict:
            return verdict, None
        ev.decide(Moment.replied, Replied(reply.threads_alive))
        with worker.reading(reply.outputs, phase) as actual, worker.reading(reply.inputs, phase) as actual_inputs:
            # Outputs of another shape are a mismatch already; a fingerprint would read all of them
            # (a stride-0 view of 2**44 elements is a few bytes to describe, terabytes to read).
            shaped = [t.shape for t in actual] == [t.shape for t in expected]
            comparison = compare_forms(ev.reference.output_form, reply.form, len(actual)) or \
                compare_outputs(expected, actual, ev.tolerance, ev.fused)
            return None, (comparison, mutated_inputs(expected_inputs, actual_inputs), fingerprint(expected),
                          fingerprint(actual) if shaped else None)


def check_trials(ev: Evaluation) -> Verdict | None:
    seeds = trial_seeds(ev.config)
    references, fingerprints = [], []
    for number, seed in enumerate(seeds, start=1):
        verdict, found = trial(ev, seed, None, "correctness")
        if verdict:
            return verdict
        comparison, changed, reference, own = found
        references.append(reference)
        fingerprints.append(own)
        if not changed:
            _worst_error(ev, comparison)
        verdict = ev.decide(Moment.trial, Trial(number, changed)) or \
            verdicts.of_trial(comparison, number, len(seeds), INIT_DIFFERS in ev.observed.flags, ev.tolerance.atol)
        if verdict:
            return verdict
        ev.observed.trials_passed = number
    return ev.decide(Moment.trials, Trials(references, fingerprints, ev.reference.degenerate(seeds)))


def _worst_error(ev: Evaluation, comparison: CheckResult) -> None:
    """The largest errors over the trials so far. An infinite one (NaN or Inf where the reference is
    finite) is recorded as none: JSON has no infinity, and the error line says what it was."""
    observed = ev.observed
    observed.max_abs_err = finite_or_none(max(observed.max_abs_err or 0.0, comparison.max_abs_err or 0.0))
    observed.max_rel_err = finite_or_none(max(observed.max_rel_err or 0.0, comparison.max_rel_err or 0.0))


def check_other_shapes(ev: Evaluation) -> Verdict | None:
    """Correct at the official shape only: flagged, or a mismatch under --strict-shapes. The first
    size it fails at is the one told."""
    for sizes in ev.reference.measured.alt_sizes:
        try:
            verdict, found = trial(ev, ev.config.seed + TRIAL_SEED_OFFSET, sizes, "shapes")
            problem = verdict.error if verdict else None if found[0].passed else found[0].reason
        except WorkerStopped as stopped:
            problem = stopped.stop.error
        what = ", ".join(f"{k}={v}" for k, v in sizes.items())
        verdict = ev.decide(Moment.shapes, Shapes(what, problem, ev.config.strict_shapes))
        if problem is not None:
            return verdict
    return None
