"""The local backend's queue: a lane keeps to its problem, waits for builds, and stops when nothing is left."""

import threading
import time

from harness.schedule.local import ReadyQueue


def test_lane_keeps_to_its_problem_and_idle_lanes_take_another():
    ready = ReadyQueue(["a", "b"], expected=4)
    for item in ("a1", "a2"):
        ready.put("a", item)
    for item in ("b1", "b2"):
        ready.put("b", item)
    assert ready.take(0) == "a1"
    assert ready.take(1) == "b1"  # lane 0 holds a
    assert ready.take(0) == "a2"
    assert ready.take(0) == "b2"
    assert ready.take(0) is None and ready.take(1) is None


def test_lane_waits_for_a_build_then_stops_when_nothing_is_left():
    ready = ReadyQueue(["a"], expected=2)
    taken = []
    lane = threading.Thread(target=lambda: taken.extend([ready.take(0), ready.take(0)]))
    lane.start()
    time.sleep(0.2)
    assert taken == []
    ready.put("a", "built")
    ready.expect_fewer()  # the other build failed: its verdict needs no lane
    lane.join(timeout=5)
    assert taken == ["built", None]
