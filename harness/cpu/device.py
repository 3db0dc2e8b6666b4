"""The CPU's side of the device seam (judge/device.py): what a CPU run's timing needs that a GPU
run's does not. The CPU is what is timed, so every other worker of the run is frozen while one is
timed (quiet.py), inputs are fed and outputs read in the worker's memory (measurement.py), and the
worker's threads are sampled from outside (sampling.py) for the hidden-library check."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

from ..judge.device import Device, ReferenceAccess, ReferenceMeasured
from ..judge.timing.timed import Timed
from ..records import Observations, SandboxReport
from ..worker.parent import Worker
from ..worker.sandbox import SandboxPolicy
from . import sampling
from .checks.hidden_library import REFERENCE_LIBRARY_TO_TELL_MS, REFERENCE_SPARSE_SAMPLES, library_to_tell_ms
from .feeding import Feeder
from .measurement import CpuMeasurement, sampled_of
from .sampling import CpuSamples

# A batch's inputs and outputs (judge/timing/protocol.py, BATCH_MS), at most: each is in four places
# at once (the reference's commit buffer, the timed worker's feed file, its outputs, their commit).
BATCH_BYTES = 128 << 20
# Room made before timing for this many checked calls' outputs (5 calls check 2.5 on average).
SPARE_COPIES = 4


def library_ms_per_call(samples: CpuSamples | None) -> float | None:
    """Sampled library CPU time a call, where sampling was not refused."""
    return None if samples is None else round(samples.library_ms_per_call, 6)


class Cpu(Device):
    name = "cpu"
    clock = "perf_counter"
    clock_means = "the host's monotonic clock around the calls, per call"
    # The parent's clock against a worker's: wake-up latency and scheduling jitter, which grow when
    # the machine idles through a long call and are not seen on the quick calls that measure the
    # overhead. Measured: docs/threat-model.md, "The timing bound".
    least_slack_ms = 1.0
    # The reference's overhead, measured in its own process, foretells the candidate's to within
    # this share of it. On the 2-core VM, where processes float between the cores, an honest
    # candidate's per-call overhead in a batch came to 0.79 to 1.39 times the reference's over three
    # integrity runs and four smaller ones (a C++ relu's 18.4 against 13.6 us, with 13.5 us calls:
    # flagged, and cut to 0.7 of its speed, in two runs of three). With both pinned to one core it
    # was 0.83 to 1.11, but that cost the run half as much time again (docs/threat-model.md).
    overhead_error = 0.4
    profiler_cost_per_op_ms = 0.1
    jitter_ms = 2.0
    trials_beside = True  # the reference computes beside the candidate: half the wall time on two cores
    prepared_references = 6
    own_checks = f"{__package__}.checks"
    warm_spares = False  # spares boot on the very cores timed, for candidates (and Triton candidates are skipped)

    def reference_measurement(self, reference: ReferenceAccess, own: bool) -> CpuMeasurement:
        """Its own timing is sampled closely too, and goes on until its sparse samples can tell
        the least library time the hidden-library check convicts of (or are enough in all)."""
        return CpuMeasurement(reference.worker, self.pace, [reference.worker.pid], Feeder(reference), sample=own,
                              tell_library_ms=REFERENCE_LIBRARY_TO_TELL_MS if own else 0.0,
                              sparse_enough=REFERENCE_SPARSE_SAMPLES if own else None)

    def candidate_measurement(self, worker: Worker, reference: ReferenceAccess,
                              measured: ReferenceMeasured) -> CpuMeasurement:
        sampled = sampled_of(measured.timed)
        return CpuMeasurement(worker, self.pace, [worker.pid, reference.worker.pid], Feeder(reference), spoil=True,
                              sample=True, tell_library_ms=library_to_tell_ms(sampled.sparse if sampled else None))

    def report(self, policy: SandboxPolicy) -> SandboxReport:
        """The sandbox's protections, and whether this host lets the harness sample a worker's
        threads (under every sandbox mode, as it confines nothing)."""
        report = policy.report()
        if (refused := sampling.refused()) is None:
            return report.model_copy(update={"active": [*report.active, "sampled_cpu_time"]})
        why = (f"sampled_cpu_time: this host does not let the harness sample a worker ({refused}): library work a "
               "candidate hides from the profiler goes unseen")
        return report.model_copy(update={"missing": [*report.missing, why]})

    def observe(self, observed: Observations, timed: Timed, reference: Timed) -> None:
        """Library CPU time a call, the candidate's and the reference's, sampled closely and sparsely."""
        own, theirs = sampled_of(timed), sampled_of(reference)
        observed.library_cpu_ms_per_call = library_ms_per_call(own.close if own else None)
        observed.sparse_library_cpu_ms_per_call = library_ms_per_call(own.sparse if own else None)
        observed.reference_library_cpu_ms_per_call = library_ms_per_call(theirs.close if theirs else None)
        observed.reference_sparse_library_cpu_ms_per_call = library_ms_per_call(theirs.sparse if theirs else None)

    def spare_copies(self, output_like: Callable[[], list[torch.Tensor]], output_bytes: int,
                     budget: int) -> list[list[torch.Tensor]]:
        """Room for the first checked calls' outputs, made (its pages touched) before the timing
        window: a 256 MB copy the parent made fresh between two timed calls made the candidate's
        next call 3 to 5 times slower on the 2-core VM, whose freed memory comes back from its host
        slowly (slow calls in 7 of 8 runs of four big problems with fresh copies, none in 3 runs
        with the room made first)."""
        if not output_bytes:
            return []
        return [[t.zero_() for t in output_like()] for _ in range(min(SPARE_COPIES, budget // output_bytes))]

    def memory_bytes(self, gpu: int | None) -> int:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def batch_bytes(self, memory_bytes: int) -> int:
        return BATCH_BYTES
