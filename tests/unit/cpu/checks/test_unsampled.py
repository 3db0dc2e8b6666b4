"""A candidate that could not be sampled where its reference would convict."""

from harness.cpu.checks.unsampled import untold_library
from harness.cpu.sampling import CpuSamples


def sampled(library: int, calls: int, samples: int = 10_000, cores: int = 2) -> CpuSamples:
    return CpuSamples(period_ms=0.05, samples=samples, library=library, calls=calls, cores=cores)


def test_a_candidate_whose_threads_could_not_be_sampled_where_the_reference_convicts_is_untold():
    """Its sampling refused (600 idle threads past the harness's limit on open files, 2026-12-05)
    where the reference's, sampled alike, would have convicted hidden library work: the rule could
    not be applied. Not where the reference's says nothing either, nor where nothing was refused."""
    reference, refusal = sampled(library=1344, calls=224), "perf_event_open: Too many open files; 603 threads on 2 CPUs"
    assert untold_library(refusal, [(sampled(library=472, calls=64), reference), (None, reference)]) == refusal
    assert untold_library(refusal, [(None, reference), (sampled(library=472, calls=64), None)]) == refusal
    assert untold_library(refusal, [(None, sampled(library=2000, calls=10_000))]) is None  # 0.01 ms a call: no rule
    assert untold_library(refusal, [(None, None)]) is None
    assert untold_library(None, [(None, reference)]) is None  # not sampled at all (a GPU run)
