"""Planning a run: who gets which cores and GPUs, and who ran since the last look."""

import os

from harness.schedule.plan import ActiveSet, plan_resources, visible_gpu


def test_cpu_run_uses_every_core_for_builds_and_pins_nothing(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    resources = plan_resources("cpu", None, None)
    assert resources.gpus == [] and resources.jobs == 16
    assert resources.build_cpus is None and resources.lane_cpus is None


def test_gpu_run_keeps_cores_apart_for_each_lane(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    one = plan_resources("cuda", [0], None)
    assert one.lane_cpus == [[14, 15]] and one.build_cpus == list(range(14)) and one.jobs == 14
    assert one.spares == 6  # booting on the build cores, two cores each
    two = plan_resources("cuda", [0, 2], 3)
    assert two.gpus == [0, 2] and two.jobs == 3
    assert two.lane_cpus == [[12, 13], [14, 15]] and two.build_cpus == list(range(12))
    assert two.spares == 3


def test_a_lanes_workers_time_on_one_core_and_its_driving_thread_keeps_off_it(monkeypatch):
    """The reference and the candidate take turns on the same core, so the per-call overhead the
    timing bound takes from one and holds the other to is measured where the other runs."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    two = plan_resources("cuda", [0, 1], None)
    assert [two.worker_cpus(lane) for lane in (0, 1)] == [[12], [14]]
    assert [two.driver_cpus(lane) for lane in (0, 1)] == [[13], [15]]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    squeezed = plan_resources("cuda", [0], None)  # one core to spare for the lane: shared by both
    assert squeezed.worker_cpus(0) == squeezed.driver_cpus(0) == [2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    unpinned = plan_resources("cuda", [0, 1], None)
    assert unpinned.worker_cpus(0) is None and unpinned.driver_cpus(0) is None


def test_too_few_cores_to_keep_apart_means_no_pinning(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    resources = plan_resources("cuda", [0, 1], None)
    assert resources.lane_cpus is None and resources.build_cpus is None and resources.jobs == 2


def test_worker_sees_the_gpu_this_process_numbers_index():
    assert visible_gpu(1, None) == "1"
    assert visible_gpu(1, "3, 5") == "5"


def test_active_set_reports_everyone_that_ran_since_the_last_look():
    active = ActiveSet()
    active.enter("x")
    active.enter("y")
    active.leave("y")
    assert active.drain() == {"x", "y"}
    assert active.drain() == {"x"}  # still running
    active.leave("x")
    assert active.drain() == {"x"}
    assert active.drain() == set()
