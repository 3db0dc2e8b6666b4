"""Computing with PyTorch (`reference_fallback`): most of a candidate's profiled time goes to the
reference's own operators, their library equivalents, or library compute of any family; or it
launches the reference's own device kernels; or, with no code of its own, what computes is hidden
from the profiler."""

from __future__ import annotations

import math

from ...records import Status
from ...worker.protocol import Profile
from ..checking import Check, Finding, Moment, ProfileSeen
from ..operators import GLUE_KERNEL, MOVES_DATA, compute_ops, data_read, family_of, op_name, time_share

FLAG = "reference_fallback"
HINT = ("compute in your own kernel: calling the reference's operators (or a library equivalent such as a matmul "
        "done as a convolution) is not a kernel")
# A candidate whose time goes mostly (more than this share) to the reference's own operators, their
# library equivalents, or library compute of any family (a matmul done as a 1x1 convolution)
# computes with PyTorch. Less is allowed: a fused kernel may keep a cheap PyTorch step.
FALLBACK_SHARE = 0.5
MIN_REFERENCE_SHARE = 0.5  # the threshold never drops below a quarter of the time
# A CPU candidate with no code of its own (no extension, no Triton) whose computing operators read
# less than LITTLE_DATA of the data the reference's read, or of its outputs' elements where those
# are fewer, computes where the profiler does not see (a red team's relu redispatched below the
# recorded call through a name built at run time, 2026-12-04, alone or beside a decoy multiply of
# two elements or of a number, or a view naming the whole input), or in the interpreter, which is
# far slower than this many reference calls (a softmax run with recording switched off through a
# name built at run time passed at 0.31x, where an honest C++ one scored 0.08x, under a factor of
# 2). The outputs bound it: an honest candidate that computes only the slice the reference keeps
# reads what it returns (a red team's, 2026-12-04). Not by time: on a problem of microseconds the
# profiler's own cost between operators (10 to 24 us each on the 2-core VM) is the call's.
HIDDEN_SPEED_FACTOR = 20.0
# Operators that read, all their calls together, less than this share of the data the reference's
# computing operators read do not do the reference's work, whatever their time on a problem of
# microseconds: an honest C++ MSE's mean of its 64 row sums was 71% to 78% of a call (a red team,
# 2026-12-04), and one that divided its sum by the count with PyTorch, its `div` 68%. Data read:
# each call's largest tensor argument (the CPU profiler's shapes), summed.
LITTLE_DATA = 1 / 16


def reads_little(profile: Profile, counts, reference: Profile | None) -> bool:
    """Whether the operators `counts(name)` accepts read less than LITTLE_DATA of the data the
    reference's computing operators read; False where either is not known."""
    reference_read = data_read(reference) if reference else math.inf
    return math.isfinite(reference_read) and data_read(profile, counts) < LITTLE_DATA * reference_read


def _why(op: str, reference_ops: set[str]) -> str:
    return "which the reference runs" if op in reference_ops else f"a library {family_of(op)} like the reference's"


def fallback_threshold(reference: Profile | None, reference_call_ms: float) -> float:
    """FALLBACK_SHARE of the time, scaled on the CPU by the share of its own call the reference
    spends in operators: on a problem of microseconds the interpreter takes a large part of any
    call, so even the reference is not 100% operators."""
    if reference is None or reference.kernels or not reference.top_op_ms:
        return FALLBACK_SHARE
    own, _ = time_share(reference, lambda op: True, reference_call_ms)
    return FALLBACK_SHARE * max(MIN_REFERENCE_SHARE, own)


def fallback_evidence(reference: Profile | None, candidate: Profile, call_ms: float = 0.0,
                      reference_call_ms: float = 0.0, own_code: bool = True, degenerate: bool = False,
                      output_elements: int = 0) -> list[str]:
    """Why the candidate's forward counts as computing with PyTorch: most of its time (more than
    fallback_threshold) goes to the reference's own operators or their library equivalents, or
    to library compute of any family; or it launches the reference's own device kernels. Empty
    if it does not. Operators that read next to none of the reference's data (`reads_little`) do
    not count. `call_ms`, `reference_call_ms`: the unprofiled medians. Without `own_code`
    (no extension, no Triton), its time outside operators counts only beyond the reference's
    whole call: up to that it is the interpreter's and the harness's (on a problem of
    microseconds half of a call: a renamed matmul measured at 37% to 100% of a 0.058 ms call,
    against a threshold of 36%), beyond it Python of its own; and not at all where every operator
    it computes with is counted. Without `own_code`, with operators that read next to none of the
    data (`hidden_compute`; `output_elements`: the outputs'), it is a fallback unless far slower
    than the reference (HIDDEN_SPEED_FACTOR), or the problem is `degenerate` (an all-zeros or
    constant answer passes: nothing needs computing)."""
    reference_ops = compute_ops(reference) if reference else set()
    families = {f for f in map(family_of, reference_ops) if f}

    def counted(op: str) -> bool:
        return op in reference_ops or family_of(op) in families

    def library(op: str) -> bool:
        return family_of(op) is not None

    # Nothing of its own computes: its time outside operators is the interpreter's, or a wait on a
    # thread it handed the reference's operator to (a 0.05 ms relu sent to a ThreadPoolExecutor
    # was convicted in two runs of four here, and passed in CI: the wait diluted its share).
    computing = compute_ops(candidate)
    only_counted = not own_code and bool(computing) and all(map(counted, computing))
    interpreter_ms = 0.0 if own_code else math.inf if only_counted else reference_call_ms
    threshold = fallback_threshold(reference, reference_call_ms) if own_code else FALLBACK_SHARE
    share, names = (0.0, set()) if reads_little(candidate, counted, reference) else \
        time_share(candidate, counted, call_ms, interpreter_ms)
    evidence = []
    if share > threshold:
        evidence += [f"calls aten::{op}, {_why(op, reference_ops)}" for op in sorted(names)]
        of = "its operators' time" if only_counted else "its time"
        evidence.append(f"{share:.0%} of {of} is in the reference's own operators or their library equivalents")
    library_share, used = (0.0, set()) if reads_little(candidate, library, reference) else \
        time_share(candidate, library, call_ms, interpreter_ms)
    if library_share > threshold and not evidence:
        kinds = ", ".join(sorted({family_of(op) for op in used}))
        evidence.append(f"{library_share:.0%} of its time is library {kinds} (more than {threshold:.0%} counts as "
                        "computing with PyTorch)")
    if not own_code and not degenerate and reference_ops and not candidate.kernels and \
            0 < call_ms < HIDDEN_SPEED_FACTOR * reference_call_ms:
        evidence += hidden_compute(candidate, reference, output_elements, reference_call_ms / call_ms)
    if reference is not None:
        shared = sorted({k.name for k in candidate.kernels} & {k.name for k in reference.kernels})
        evidence += [f"launches the reference's kernel {k[:120]}" for k in shared if not GLUE_KERNEL.search(k)]
    return evidence


def hidden_compute(candidate: Profile, reference: Profile, output_elements: int, speedup: float) -> list[str]:
    """Why a candidate with no code of its own, at `speedup` against the reference, computes where
    the profiler does not see: its operators that compute or copy data read less than LITTLE_DATA
    of the data the reference's read, or of its `output_elements` where those are fewer; or,
    where the reference's read is not known, it has no such operator at all."""
    working = compute_ops(candidate) | ({op_name(op) for op in candidate.ops} & MOVES_DATA)
    read = data_read(candidate, lambda op: op in working)
    reference_read = data_read(reference)
    needed = min(reference_read, output_elements or math.inf)  # outputs alone: an outer product reads less
    if working and not (math.isfinite(reference_read) and read < LITTLE_DATA * needed):
        return []
    seen = f"its operators that compute or copy read {read:.0f} element{'s' * (round(read) != 1)} of data where " \
           f"the reference's read {reference_read:.0f} and its outputs have {output_elements}" if working \
        else "no operator the profiler recorded computes or copies data"
    return [f"{seen}; it has no code of its own and runs at {speedup:.2f}x the reference: what computes is hidden "
            "from the profiler (or is torch.compile's, or numpy's)"]


def found(evidence: list[str]) -> Finding | None:
    """The verdict every source of this flag gives (this check, judge/checks/hidden_operators.py,
    harness/cpu/checks/hidden_library.py): its first evidence is its one line."""
    if not evidence:
        return None
    return Finding(FLAG, evidence, Status.rejected, f"forward computes with PyTorch's own kernels: {evidence[0]}")


def look(seen: ProfileSeen) -> Finding | None:
    evidence: list[str] = []
    for profile in seen.profiles:
        more = fallback_evidence(seen.reference_profile, profile, seen.median_ms, seen.reference_median_ms,
                                 own_code=seen.own_code, degenerate=seen.degenerate,
                                 output_elements=seen.output_elements)
        evidence += [e for e in more if e not in evidence]
    return found(evidence)


CHECKS = [Check("reference_fallback", FLAG, Moment.profile, look, HINT, order=20)]
