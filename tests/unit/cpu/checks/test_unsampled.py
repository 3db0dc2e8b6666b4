"""A candidate that could not be sampled where its reference would convict."""

from harness.cpu.checks.unsampled import look, untold_library
from harness.cpu.measurement import Sampled
from harness.cpu.sampling import CpuSamples
from harness.judge.checking import Finding, ProfileSeen
from harness.judge.timing.timed import Timed
from harness.judge.verdicts import of_findings
from harness.records import Phase, Status


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


def test_the_candidate_untold_is_skipped_as_not_timed_and_only_where_nothing_else_convicts_it():
    """The verdict is decided at its timing (its phase), and fallback evidence found by the checks
    before it still rejects the candidate."""
    reference = sampled(library=1344, calls=224)
    seen = ProfileSeen(code="", own_code=True, profiles=[], median_ms=1.0, reference_profile=None,
                       reference_median_ms=1.0, degenerate=False, output_elements=1, no_custom_kernel=None,
                       timed=Timed(gathered=Sampled(None, None, "perf_event_open: Too many open files", 0, 0.0)),
                       reference_timed=Timed(gathered=Sampled(reference, reference, None, 2, 10.0)))
    found = look(seen)
    verdict = of_findings([found])
    assert verdict.status is Status.skipped and verdict.phase is Phase.timing and "Too many open files" in verdict.error
    caught = Finding("reference_fallback", ["calls aten::mm"], Status.rejected, "computes with PyTorch")
    assert of_findings([caught, found]).status is Status.rejected
