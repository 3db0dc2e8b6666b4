"""The worker's clock: one call timed on the CPU here; the GPU's hold and join as arithmetic (the
GPU's events themselves in tests/gpu)."""

import time

import pytest

from harness.worker.timing import JOIN_SLACK_MS, hold_shape, joined_ms, time_call


def test_a_call_is_timed_with_a_monotonic_clock():
    timed = time_call(lambda: time.sleep(0.01), None)
    assert 9.0 <= timed.elapsed_ms < 100.0
    assert timed.host_ms == timed.elapsed_ms  # on the CPU the host's time is the call's


def test_the_hold_takes_every_thread_slot_of_every_sm():
    # H100/A100: 2048 threads an SM, two blocks of 1024; consumer Ampere/Ada: 1536, two of 768.
    assert hold_shape(132, 2048) == (264, 1024)
    assert hold_shape(84, 1536) == (168, 768)
    assert hold_shape(10, 1024) == (10, 1024)
    for sms, per_sm in ((132, 2048), (84, 1536), (46, 1024)):
        blocks, threads = hold_shape(sms, per_sm)
        assert threads <= 1024 and blocks * threads == sms * per_sm


def test_a_join_as_quick_as_the_workers_own_adds_nothing():
    assert joined_ms(0.05, 0.015, own_join_ms=0.015) == 0.05
    assert joined_ms(0.05, 0.015 + JOIN_SLACK_MS * 0.9, own_join_ms=0.015) == 0.05  # wake-up jitter


def test_work_left_on_other_streams_past_the_end_is_the_calls_all_of_it():
    # The timed stream ended at 0.01 ms, a side stream's kernel ran 0.04 ms longer: the join took that much more.
    assert abs(joined_ms(0.01, 0.055, own_join_ms=0.015) - 0.05) < 1e-12


def test_a_call_that_took_nothing_still_took_a_nanosecond():
    assert joined_ms(0.0, 0.015, own_join_ms=0.015) == 1e-6  # a reply's times are at least that


def test_a_gpu_clock_that_cannot_be_set_up_says_it_is_the_harnesss(monkeypatch):
    from harness.worker import child

    def refused():
        raise OSError("libnvrtc.so: cannot open shared object file")

    assert child.gpu_clock("cpu") is None
    monkeypatch.setattr(child, "GpuClock", refused)
    with pytest.raises(RuntimeError, match="the harness's GPU clock could not be set up: libnvrtc"):
        child.gpu_clock("cuda")
