"""Right when checked, wrong when timed (`inconsistent_when_timed`): a timed call the parent chose
to check after the fact returned a wrong output, though the correctness trials passed. Where calls
of one command returned their outputs in the same memory (a buffer the candidate keeps), a wrong
output is that, not a cheat: no call's answer outlived the next call (judge/verdicts.py,
`of_checked_timed_calls`)."""

from __future__ import annotations

from ...records import Status
from ...worker.protocol import ALLOWED_DTYPES, TensorRef
from ..checking import Check, Finding, Moment, TimedOutputs

FLAG = "inconsistent_when_timed"
HINT = ("compute every call's output from that call's inputs: outputs are checked on timed calls too, chosen after "
        "the fact")


def _memory_of(ref: TensorRef) -> tuple[object, int, int]:
    """Where a timed output lies in the worker: (its allocation or address space, first byte, end):
    from its first element, so that different slices of one buffer are told apart."""
    element = ALLOWED_DTYPES[ref.dtype].itemsize if ref.dtype in ALLOWED_DTYPES else 1
    base = (None, ref.address) if ref.address is not None else (ref.ipc_handle, ref.offset)
    return base[0], base[1] + ref.storage_offset * element, base[1] + ref.span_bytes


def outputs_shared(calls: list[list[TensorRef]]) -> bool:
    """Whether two calls of one timed command returned outputs in the same memory (a buffer the
    candidate keeps and returns each call): the later call overwrote the earlier one's answer.
    `calls`: each call's outputs, as the worker described them (CPU ones by their place in its
    memory, GPU ones by allocation; stacked in its commit buffer, nothing to tell)."""
    seen: list[tuple[int, tuple[object, int, int]]] = []
    for index, outputs in enumerate(calls):
        for ref in outputs:
            if ref.address is None and ref.ipc_handle is None:
                continue
            owner, begin, end = _memory_of(ref)
            if end <= begin:  # no elements
                continue
            if any(other != index and owner == o and begin < e and b < end for other, (o, b, e) in seen):
                return True
            seen.append((index, (owner, begin, end)))
    return False


def look(seen: TimedOutputs) -> Finding | None:
    if seen.comparison.passed:
        return None
    return Finding(FLAG, [], Status.rejected,
                   f"checked timed call {seen.index} returned a wrong output ({seen.comparison.reason}), though the "
                   "correctness trials passed")


CHECKS = [Check("inconsistent_when_timed", FLAG, Moment.timed_outputs, look, HINT)]
