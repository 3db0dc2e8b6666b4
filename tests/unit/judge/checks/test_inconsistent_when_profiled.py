"""Slower when profiled than the profiler's own cost explains."""

from harness.cpu.device import Cpu
from harness.judge.checks.inconsistent_when_profiled import profiled_too_slow
from harness.judge.gpu import Gpu
from harness.judge.timing.timed import Timed
from harness.worker.protocol import Profile


def too_slow(candidate, reference, reference_ops, device):
    return profiled_too_slow(candidate, reference, reference_ops, device.profiler_cost_per_op_ms, device.jitter_ms)


def test_slower_when_profiled_than_the_profiler_explains():
    reference = Timed(wall_ms=[1.0] * 5, profiled_wall_ms=[1.3])
    two_ops = [Profile(ops=["aten::empty", "aten::add"])]
    calm = Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[1.6], profiles=two_ops)
    assert too_slow(calm, reference, 3, Gpu) is None  # the profiler's own cost
    watched = Timed(wall_ms=[1.0] * 9, profiled_wall_ms=[9.0, 11.0], profiles=two_ops)
    assert "profiled calls took at least 9" in too_slow(watched, reference, 3, Gpu)


def test_the_profilers_cost_grows_with_the_operators_recorded():
    """Measured on the 2-core CPU: a 0.07 ms linear as a broadcast multiply-sum took 4.3 ms when
    profiled; the reference's 8 operators had cost it 1.7 ms."""
    reference = Timed(wall_ms=[0.69] * 5, profiled_wall_ms=[2.4])
    many_ops = [Profile(ops=[f"aten::op{i}" for i in range(6)])]
    honest = Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[4.3, 4.6], profiles=many_ops)
    assert too_slow(honest, reference, 8, Cpu) is None
    assert too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[40.0], profiles=many_ops), reference, 8, Cpu)


def test_operators_named_by_the_thousand_buy_no_more_room_than_a_composed_candidate_needs():
    """The list of operators is the worker's to write: ten thousand names must not excuse a
    profiled call 200 times slower than the others."""
    reference = Timed(wall_ms=[0.69] * 5, profiled_wall_ms=[2.4])
    padded = [Profile(ops=[f"aten::op{i}" for i in range(10_000)])]
    assert too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[150.0], profiles=padded), reference, 8, Cpu)
    dozen = [Profile(ops=[f"aten::op{i}" for i in range(12)])]
    assert too_slow(Timed(wall_ms=[0.7] * 9, profiled_wall_ms=[6.0], profiles=dozen), reference, 8, Cpu) is None


def test_a_launch_bound_honest_candidate_is_not_convicted_for_the_profilers_cost_per_call():
    """Measured on an H100 (2026-11-26): 256 calls of 8 operators took 4.6 ms, and 16.1 ms
    profiled: 34 to 75 us a call beside a fixed 1.6 ms, which a relu reference paid for its one
    operator. Room per operator named, at the reference's whole cost, covers those calls; room
    for the fixed cost plus a floor per name would not (11.8 ms)."""
    relu = Timed(wall_ms=[0.25] * 5, profiled_wall_ms=[1.85])
    eight = [Profile(ops=[f"aten::op{i}" for i in range(8)])]
    launch_bound = Timed(wall_ms=[4.57] * 9, profiled_wall_ms=[16.07], profiles=eight)
    assert too_slow(launch_bound, relu, 1, Gpu) is None
