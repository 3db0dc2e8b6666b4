"""The worker's clock: one call timed, on the CPU here (the GPU's events in tests/gpu)."""

import time

from harness.worker.timing import time_call


def test_a_call_is_timed_with_a_monotonic_clock():
    elapsed = time_call(lambda: time.sleep(0.01), None)
    assert 9.0 <= elapsed < 100.0
