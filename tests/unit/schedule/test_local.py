"""The local backend's queues: a lane keeps to its problem, waits for builds, and stops when nothing is left;
results reach the caller until the run is stopped, and not after."""

import itertools
import math
import threading
import time

from harness.records import Result, Status
from harness.schedule.local import Outbox, ReadyQueue, StartAhead


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
    ready.admit("a"), ready.admit("a")
    taken = []
    lane = threading.Thread(target=lambda: taken.extend([ready.take(0), ready.take(0)]))
    lane.start()
    time.sleep(0.2)
    assert taken == []
    ready.put("a", "built")
    ready.expect_fewer("a")  # the other build failed: its verdict needs no lane
    lane.join(timeout=5)
    assert taken == ["built", None]


def test_a_waiting_lane_hears_of_candidates_admitted_meanwhile():
    ready = ReadyQueue(["a"], expected=1)
    taken = []
    lane = threading.Thread(target=lambda: taken.append(ready.take(0, ahead=set())))
    lane.start()
    time.sleep(0.2)
    assert taken == []
    ready.admit("a")  # its build starts: the lane may start a's reference meanwhile
    lane.join(timeout=5)
    assert taken == [StartAhead("a")]


def test_a_lane_with_nothing_ready_starts_the_references_of_problems_still_building():
    ready = ReadyQueue(["a", "b", "c"], expected=3)
    for problem in ("a", "b", "c"):
        ready.admit(problem)
    assert ready.take(0, ahead=set()) == StartAhead("a")
    assert ready.take(0, ahead={"a"}) == StartAhead("b")  # a's reference is started already
    ready.put("b", "b1")
    assert ready.take(1) == "b1"
    assert ready.take(0, ahead={"a"}) == StartAhead("c")  # b has nothing more to come
    ready.expect_fewer("c")  # c's only build failed: no reference to start
    ready.put("a", "a1")
    assert ready.take(0, ahead={"a"}) == "a1" and ready.take(0, ahead={"a"}) is None


def test_a_lane_hears_whether_more_of_its_problem_may_come():
    """Its reference keeps expected outputs only for later candidates of the problem: those ready,
    those still building, and on a stream any."""
    ready = ReadyQueue(["a", "b"], expected=3)
    ready.admit("a"), ready.admit("a"), ready.admit("b")
    ready.put("a", "a1")
    assert ready.take(0) == "a1" and ready.more_of("a")  # a2 still building
    ready.put("b", "b1")
    assert ready.take(1) == "b1" and not ready.more_of("b")
    ready.expect_fewer("a")  # a2 failed to build
    assert not ready.more_of("a")
    stream = ReadyQueue(["a"], expected=math.inf)
    stream.admit("a"), stream.put("a", "a1")
    assert stream.take(0) == "a1" and stream.more_of("a")


def crash(candidate: str) -> Result:
    return Result(run_id="r", problem="p", candidate=candidate, status=Status.crash, candidate_hash="h")


def test_a_lane_waits_until_its_result_is_stored_or_the_outbox_closes():
    outbox = Outbox()
    emitted = threading.Event()
    lane = threading.Thread(target=lambda: (outbox.emit(crash("judged.py")), emitted.set()))
    lane.start()
    results = outbox.collect(itertools.count())
    assert next(results).candidate == "judged.py"
    assert not emitted.wait(0.3)  # the caller has not stored it yet
    outbox.close()  # a stop: the kill that follows decides nothing
    lane.join(timeout=5)
    assert emitted.is_set()
    assert list(results) == []  # the stream ends
