"""Library work hidden from the profiler, sampled from outside."""

import pytest

from harness.cpu.checks.hidden_library import hidden_library_evidence, library_to_tell_ms
from harness.cpu.sampling import CpuSamples
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
