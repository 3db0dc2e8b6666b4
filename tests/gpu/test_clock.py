"""The worker's GPU clock (worker/timing.py) in this process: the host's path into a call is not
its time, work on other streams is, whether left running past the call's end or started early."""

import statistics
import time

import pytest
import torch

from harness.worker.timing import HOLD_US, GpuClock, time_call

pytestmark = pytest.mark.gpu
CALLS = 50
SLEEP_CYCLES = 400_000  # torch.cuda._sleep: about 0.2 ms on an H100, about the hold


@pytest.fixture(scope="module")
def clock():
    return GpuClock()


def median_ms(call, clock, field="elapsed_ms") -> float:
    call()
    return statistics.median(getattr(time_call(call, clock), field) for _ in range(CALLS))


def spin_host(us: float) -> None:
    until = time.perf_counter_ns() + us * 1000
    while time.perf_counter_ns() < until:
        pass


def test_the_hosts_path_into_a_call_is_not_its_time_but_is_recorded(clock):
    x = torch.randn(4096, 4096, device="cuda")
    plain = lambda: torch.relu(x)
    slow_host = lambda: (spin_host(HOLD_US / 2), torch.relu(x))
    device, device_slow = median_ms(plain, clock), median_ms(slow_host, clock)
    host, host_slow = median_ms(plain, clock, "host_ms"), median_ms(slow_host, clock, "host_ms")
    print(f"device {device:.4f} / {device_slow:.4f} ms, host {host:.4f} / {host_slow:.4f} ms")
    assert abs(device_slow - device) < 0.003
    assert host_slow - host > HOLD_US / 2 / 1000 * 0.8


def test_a_host_path_longer_than_the_hold_shows_as_the_gpu_waiting(clock):
    x = torch.randn(4096, 4096, device="cuda")
    device = median_ms(lambda: torch.relu(x), clock)
    late = median_ms(lambda: (spin_host(HOLD_US * 3), torch.relu(x)), clock)
    assert late - device > HOLD_US * 1.5 / 1000, (device, late)


def test_work_left_on_a_side_stream_past_the_calls_end_is_timed(clock):
    side = torch.cuda.Stream()

    def on_side():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)

    alone = median_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES), clock)
    left = median_ms(on_side, clock)
    print(f"on the timed stream {alone:.4f} ms, left on a side stream {left:.4f} ms")
    assert left > alone * 0.95


def test_work_on_a_side_stream_cannot_start_inside_the_hold(clock):
    """Started at once on a stream that does not wait for the timed one, then joined back: had it
    run beside the hold, the call would have taken the hold's length less."""
    side = torch.cuda.Stream()

    def early():
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
        torch.cuda.current_stream().wait_stream(side)

    alone = median_ms(lambda: torch.cuda._sleep(SLEEP_CYCLES), clock)
    started_early = median_ms(early, clock)
    print(f"on the timed stream {alone:.4f} ms, started early on a side stream {started_early:.4f} ms")
    assert started_early > alone - 0.005


def test_the_gpus_clock_limits_are_read_where_nvml_is_installed():
    pytest.importorskip("pynvml")
    from harness.judge import nvml

    before = nvml.limited_ns(torch.cuda.current_device())
    assert before is not None and "power" in before, before
    torch.cuda._sleep(2_000_000)
    torch.cuda.synchronize()
    after = nvml.limited_ns(torch.cuda.current_device())
    assert all(after[name] >= before[name] for name in before), (before, after)
