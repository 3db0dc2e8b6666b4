"""The GPU's clock limits read around a timing (judge/nvml.py), against a stand-in for NVML's
binding: the real one is read on the GPU machine only."""

from types import SimpleNamespace

import pytest

from harness.judge import nvml
from harness.judge.gpu import GpuMeasurement
from harness.judge.timing.timed import Timed
from tests.fakes import FakeWorker


class FakeNvml:
    """NVML's violation counters for one GPU: power and thermal counted, the others unsupported."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.ns = {0: 5_000_000, 1: 0}

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy not in self.ns:
            raise self.NVMLError("not supported")
        return SimpleNamespace(violationTime=self.ns[policy])


@pytest.fixture
def fake(monkeypatch):
    binding = FakeNvml()
    monkeypatch.setattr(nvml, "_nvml", lambda: binding)
    monkeypatch.setattr(nvml, "_handle", lambda gpu: "handle")
    return binding


def test_only_the_limits_that_held_the_clocks_down_meanwhile_are_counted(fake):
    before = nvml.limited_ns(0)
    assert before == {"power": 5_000_000, "thermal": 0}  # unsupported limits are left out
    fake.ns[1] = 2_500_000
    assert nvml.throttled_between(before, nvml.limited_ns(0)) == {"thermal": 2.5}
    assert nvml.throttled_between(before, before) == {}


def test_a_gpu_timing_records_how_long_the_clocks_were_held_down_meanwhile(fake):
    worker, timed = FakeWorker(), Timed()
    worker.gpu = 0
    with GpuMeasurement(worker).window(timed):
        fake.ns[0] += 3_000_000
    assert timed.throttled_ms == {"power": 3.0}


def test_nothing_is_said_where_nvml_cannot_be_read(monkeypatch):
    monkeypatch.setattr(nvml, "_handle", lambda gpu: None)
    assert nvml.limited_ns(0) is None
    assert nvml.throttled_between(None, {"power": 1}) is None


def test_a_second_look_adds_its_calls_and_its_limits():
    first = Timed(reported_ms=[1.0], wall_ms=[1.2], others_cores=0.1, throttled_ms={"power": 1.0})
    first.extend(Timed(reported_ms=[2.0], wall_ms=[2.2], stopped="converged", others_cores=None,
                       throttled_ms={"power": 0.5, "thermal": 2.0}))
    assert first.reported_ms == [1.0, 2.0] and first.wall_ms == [1.2, 2.2] and first.stopped == "converged"
    assert first.others_cores == 0.1 and first.throttled_ms == {"power": 1.5, "thermal": 2.0}
