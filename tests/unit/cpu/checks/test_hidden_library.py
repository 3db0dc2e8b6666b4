"""Library work hidden from the profiler, sampled from outside."""

import pytest

from harness.cpu.checks.hidden_library import hidden_library_evidence, library_to_tell_ms, look, untold_hidden_library
from harness.cpu.measurement import Sampled
from harness.cpu.sampling import CpuSamples
from harness.judge.checking import ProfileSeen
from harness.judge.timing.timed import Timed
from harness.records import Phase, Status
from harness.worker.protocol import Profile


def sampled(library: int, calls: int, samples: int = 10_000, cores: int = 2) -> CpuSamples:
    return CpuSamples(period_ms=0.05, samples=samples, library=library, calls=calls, cores=cores)


def test_library_time_no_recorded_operator_explains_is_the_reference_hidden_from_the_profiler():
    """Sampled from outside: an extension that computes nothing beside a softmax redispatched
    below the profiler spent 123% of the reference's library time a call there (0.37 against
    0.30 ms), an honest C++ softmax 11% (its allocation and dispatch)."""
    reference = sampled(library=1344, calls=224)
    hidden = hidden_library_evidence(sampled(library=472, calls=64), [Profile(ops=[]), Profile(ops=[])], reference)
    assert len(hidden) == 1 and "no recorded operator explains" in hidden[0] and "123%" in hidden[0]
    honest = sampled(library=35, calls=54)
    assert hidden_library_evidence(honest, [Profile(ops=["aten::empty_like"], top_op_ms={"aten::empty_like": 0.01})],
                                   reference) == []


def test_library_time_its_recorded_operators_explain_is_left_to_the_fallback_rules():
    """A candidate that computes with operators the profiler sees is judged by its share of the
    time (fallback_evidence), not as hidden work: their time counts on every core it may use (an
    honest softmax of five PyTorch operators, 0.31 ms of library time a call beyond their time
    scaled by the reference's own use of threads, 1.2, had been taken for hidden work)."""
    reference = sampled(library=1344, calls=224)
    composed = [Profile(ops=["aten::exp", "aten::sum"], top_op_ms={"aten::exp": 0.08, "aten::sum": 0.02})]
    assert hidden_library_evidence(sampled(library=472, calls=64, cores=2), composed, reference) == []
    assert hidden_library_evidence(sampled(library=472, calls=64, cores=1), composed, reference) != []
    # Three recorded passes where the reference makes one: 18% of its library time unexplained
    # (noise between the profiled and the sampled calls) is 55% of the reference's, and no hiding.
    relu = sampled(library=400, calls=100)  # 0.2 ms a call
    three_passes = [Profile(ops=["aten::abs", "aten::add", "aten::mul"],
                            top_op_ms={"aten::abs": 0.1, "aten::add": 0.1, "aten::mul": 0.046})]
    assert hidden_library_evidence(sampled(library=1200, calls=100), three_passes, relu) == []


def test_hidden_library_time_counts_only_where_the_calls_sampled_can_tell_it():
    """Sampled sparsely (every 2 ms), 100 calls give a candidate hiding 0.37 ms a call 18 samples:
    too few to tell half of it from none; 500 calls, 92."""
    reference = sampled(library=1344, calls=224)  # 0.3 ms a call
    assert library_to_tell_ms(reference) == pytest.approx(0.15)

    def sparse(calls: int) -> CpuSamples:
        return CpuSamples(period_ms=2.0, samples=round(calls * 0.4 / 2), library=round(calls * 0.37 / 2), calls=calls)
    assert hidden_library_evidence(sparse(100), [Profile(ops=[])], reference) == []
    assert not sparse(100).tells(0.185) and sparse(500).tells(0.185)
    assert "no recorded operator explains" in hidden_library_evidence(sparse(500), [Profile(ops=[])], reference)[0]
    assert library_to_tell_ms(sampled(library=40, calls=4)) == 0.0  # too few samples of the reference's to go by


def test_a_reference_with_little_library_time_says_nothing_about_hidden_work():
    """On a problem of microseconds, dispatch and allocation are most of any call's library time
    (an honest candidate's as much as the reference's); and too few samples say nothing."""
    quick = sampled(library=2000, calls=10_000)  # 0.01 ms a call
    assert hidden_library_evidence(sampled(library=2000, calls=10_000), [Profile(ops=[])], quick) == []
    few = sampled(library=40, calls=4)  # 0.5 ms a call, in 40 samples
    assert hidden_library_evidence(sampled(library=40, calls=4), [Profile(ops=[])], few) == []
    assert hidden_library_evidence(None, [Profile(ops=[])], sampled(library=1344, calls=224)) == []


def test_library_time_that_would_convict_in_too_few_calls_to_tell_leaves_the_candidate_unjudged():
    """A busy host cuts the calls a timing may make: time that would convict, in too few of them to
    tell it from none, is not judged rather than passed; a handful of samples says nothing, and
    where the calls tell it, it convicts."""
    reference = sampled(library=1344, calls=224)  # 0.3 ms a call
    few_calls = CpuSamples(period_ms=2.0, samples=200, library=10, calls=80, cores=2)  # 0.25 ms a call, 80 calls
    assert hidden_library_evidence(few_calls, [Profile(ops=[])], reference) == []
    assert "too few to tell it from none" in untold_hidden_library(few_calls, [Profile(ops=[])], reference)
    handful = CpuSamples(period_ms=2.0, samples=200, library=3, calls=24, cores=2)  # 0.25 ms a call, 3 samples
    assert untold_hidden_library(handful, [Profile(ops=[])], reference) is None
    told = CpuSamples(period_ms=2.0, samples=2000, library=125, calls=1000, cores=2)
    assert hidden_library_evidence(told, [Profile(ops=[])], reference) and \
        untold_hidden_library(told, [Profile(ops=[])], reference) is None
    honest = CpuSamples(period_ms=2.0, samples=200, library=1, calls=80, cores=2)
    assert untold_hidden_library(honest, [Profile(ops=[])], reference) is None


def test_the_check_convicts_first_and_leaves_the_untold_unjudged_at_its_timing():
    reference = sampled(library=1344, calls=224)
    few_calls = CpuSamples(period_ms=2.0, samples=200, library=10, calls=80, cores=2)

    def seen(close, sparse) -> ProfileSeen:
        return ProfileSeen(code="", own_code=True, profiles=[], median_ms=1.0, reference_profile=None,
                           reference_median_ms=1.0, degenerate=False, output_elements=1, no_custom_kernel=None,
                           timed=Timed(gathered=Sampled(close, sparse, None, 2, 10.0)),
                           reference_timed=Timed(gathered=Sampled(reference, reference, None, 2, 10.0)))

    untold = look(seen(None, few_calls))
    assert untold.status is Status.skipped and untold.phase is Phase.timing and "not judged" in untold.error
    convicted = look(seen(sampled(library=472, calls=64), few_calls))
    assert convicted.status is Status.rejected and convicted.flag == "reference_fallback"
    assert look(seen(None, None)) is None


def test_library_time_that_would_convict_against_a_reference_sampled_in_too_few_calls_leaves_it_unjudged():
    """A reference sampled sparsely in too few calls to say whether the rule applies (its timing ran
    out of time on a busy host: one library sample in 28 calls, against 191 closely) cannot clear a
    candidate that spends library time there unrecorded; one that spends little there says nothing,
    and a reference sampled in calls enough says the rule does not apply."""
    thin = CpuSamples(period_ms=2.0, samples=147, library=1, calls=28, cores=2)  # 0.07 ms a call, by one sample
    hidden = CpuSamples(period_ms=2.0, samples=259, library=10, calls=84, cores=2)  # 0.24 ms a call
    assert hidden_library_evidence(hidden, [Profile(ops=[])], thin) == []
    assert "reference sampled in 28 calls: too few to tell" in untold_hidden_library(hidden, [Profile(ops=[])], thin)
    honest = CpuSamples(period_ms=2.0, samples=259, library=2, calls=84, cores=2)
    assert untold_hidden_library(honest, [Profile(ops=[])], thin) is None
    quick = CpuSamples(period_ms=2.0, samples=3000, library=20, calls=2000, cores=2)  # 0.02 ms a call, in calls enough
    assert untold_hidden_library(hidden, [Profile(ops=[])], quick) is None


def test_a_slow_honest_kernel_stray_library_samples_are_no_hidden_work():
    """A slow honest kernel's calls show a few stray library samples (allocation, the thread pool),
    which the reference's quick calls share among many: beside two busy loops an honest C++ matmul
    of 19 ms a call showed 0.43 ms a call against the reference's 0.33 (2026-12-07). Under a tenth
    of its own call that is no hiding; the same time in a call of the reference's length is."""
    reference = CpuSamples(period_ms=2.0, samples=3000, library=165, calls=1000, cores=2)  # 0.33 ms a call
    stray = CpuSamples(period_ms=2.0, samples=30_000, library=65, calls=300, cores=2)  # 0.43 ms a call
    assert hidden_library_evidence(stray, [Profile(ops=[])], reference, call_ms=19.4) == []
    assert untold_hidden_library(stray, [Profile(ops=[])], reference, call_ms=19.4) is None
    assert hidden_library_evidence(stray, [Profile(ops=[])], reference, call_ms=0.7) != []
    few_calls = CpuSamples(period_ms=2.0, samples=2000, library=10, calls=46, cores=2)  # 0.43 ms a call, untold
    assert untold_hidden_library(few_calls, [Profile(ops=[])], reference, call_ms=19.4) is None
    assert untold_hidden_library(few_calls, [Profile(ops=[])], reference, call_ms=0.7) is not None


def test_a_busy_host_stretching_a_call_leaves_no_room_to_hide_library_work():
    """Beside a busy loop on a host loaded by a test suite too, a noop beside a hidden softmax had a
    median of 10.6 ms a call (the reference 13.6): a tenth of that let its 0.6 ms a call pass. Its
    call is the lesser of its median and the CPU time its calls were sampled for."""
    reference = CpuSamples(period_ms=0.05, samples=30_000, library=12_400, calls=1000, cores=2)  # 0.62 ms a call
    hidden = CpuSamples(period_ms=0.05, samples=2_000, library=1_200, calls=100, cores=2)  # 0.6 of 1 ms a call
    assert hidden.cpu_ms_per_call == pytest.approx(1.0) and hidden.library_ms_per_call == pytest.approx(0.6)
    assert hidden_library_evidence(hidden, [Profile(ops=[])], reference, call_ms=10.6) != []
