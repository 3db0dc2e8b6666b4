"""The quiet gate of a CPU run: while one thread times, every other process of the run is stopped,
including one forked while the freeze was under way, and no worker starts until the window closes."""

import os
import subprocess
import sys
import threading
import time

import pytest

from harness.cpu.quiet import QuietGate
from harness.worker import processes
from harness.worker.pace import RunGate, RunStopped
from harness.worker.parent import RUN_TOKEN_VAR

# Forks a sleeping child every few milliseconds (at most 300): a tree that grows while it is frozen.
FORKER = """
import os, time
for _ in range(300):
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    time.sleep(0.002)
time.sleep(60)
"""


@pytest.fixture
def gate():
    return QuietGate(f"test-{os.getpid()}-{time.monotonic_ns()}")


@pytest.fixture
def forker(gate):
    token = gate.marker.decode().split("=", 1)[1]
    process = subprocess.Popen([sys.executable, "-c", FORKER], env=os.environ | {RUN_TOKEN_VAR: token})
    time.sleep(0.3)  # forking by now
    yield process.pid
    processes.kill_tree(process.pid)
    process.wait()


def test_a_window_stops_a_growing_tree_whole_and_resumes_it(gate, forker):
    with gate.window([]):
        frozen = processes.tree(forker)
        assert all(processes.stopped(pid) for pid in frozen)
        time.sleep(0.2)
        assert processes.tree(forker) == frozen  # nothing forked after the freeze
    time.sleep(0.2)
    assert not processes.stopped(forker) and len(processes.tree(forker)) > len(frozen)


def test_the_timed_tree_is_spared(gate, forker):
    with gate.window([forker]):
        assert not processes.stopped(forker)


def test_no_worker_starts_while_another_thread_times(gate):
    started = threading.Event()

    def start():
        with gate.launching():
            started.set()

    with gate.window([]):
        starter = threading.Thread(target=start)
        starter.start()
        assert not started.wait(0.3)
        with gate.launching():  # the timing thread itself is never kept waiting
            pass
    assert started.wait(5)
    starter.join()


def test_a_window_waits_for_a_start_under_way(gate):
    opened = threading.Event()

    def time_it():
        with gate.window([]):
            opened.set()

    with gate.launching():
        timer = threading.Thread(target=time_it)
        timer.start()
        assert not opened.wait(0.3)
    assert opened.wait(5)
    timer.join()


def test_the_quiet_time_does_not_count_on_the_workers_clock(gate):
    before = gate.clock()
    with gate.window([]):
        time.sleep(0.3)
    assert gate.clock() - before < 0.1


@pytest.mark.parametrize("quiet", [True, False])
def test_once_closed_no_worker_starts_and_a_start_under_way_finishes_first(quiet):
    """A run's stop closes the gate before it kills: what it kills is then everything the run has
    (on a GPU run, whose gate freezes nothing, too)."""
    gate = QuietGate(f"test-{os.getpid()}-{time.monotonic_ns()}") if quiet else RunGate()
    starting, release, closed = threading.Event(), threading.Event(), threading.Event()

    def start():
        with gate.launching():
            starting.set()
            release.wait(5)

    starter = threading.Thread(target=start)
    starter.start()
    assert starting.wait(5)
    closer = threading.Thread(target=lambda: (gate.close(), closed.set()))
    closer.start()
    while refused_now(gate) is False:  # until the closer has closed it
        time.sleep(0.01)
    time.sleep(0.1)
    assert not closed.is_set()  # closed, and still waiting for the start under way
    release.set()
    assert closed.wait(5)
    assert refused_now(gate)
    starter.join()
    closer.join()


def refused_now(gate: RunGate) -> bool:
    try:
        with gate.launching():
            return False
    except RunStopped:
        return True


def test_a_start_waiting_for_another_threads_window_gives_up_when_the_gate_closes(gate):
    refused = threading.Event()

    def start():
        try:
            with gate.launching():
                pass
        except RunStopped:
            refused.set()

    with gate.window([]):
        starter = threading.Thread(target=start)
        starter.start()
        time.sleep(0.3)  # waiting for the window by now
        assert not refused.is_set()
        gate.close()
        assert refused.wait(5)
    starter.join()


BUSY_LOOP = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"


def busy_loop(env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BUSY_LOOP], env=env)


def cores_of(pid: int, ticks_before: dict, seconds: float) -> float:
    """The cores process `pid` kept busy since `ticks_before` (processes.cpu_ticks), over `seconds`."""
    (_, before), = ticks_before.items()
    (_, after), = processes.cpu_ticks([pid]).items()
    return (after - before) / processes.TICKS_PER_S / seconds


def test_a_window_counts_an_outsiders_time_and_never_the_runs_own(gate):
    """A busy loop of the run's (the timed one) and an outsider's run through one window: the
    window counts the outsider's CPU time and not the run's, which the same window's figure for
    everyone but this process shows beside it. Held against those processes' own CPU time, not
    against an idle machine: other load (the suite beside busy loops) is in both figures alike."""
    token = gate.marker.decode().split("=", 1)[1]
    timed, outsider = busy_loop(os.environ | {RUN_TOKEN_VAR: token}), busy_loop()
    try:
        time.sleep(0.2)  # past their start
        before = {pid: processes.cpu_ticks([pid]) for pid in (timed.pid, outsider.pid)}
        began = time.monotonic()
        with processes.OthersCpu(lambda: [os.getpid()]) as everyone_else, gate.window([timed.pid]) as window:
            time.sleep(processes.OthersCpu.MIN_SECONDS + 0.15)
        seconds = time.monotonic() - began
        runs, outsiders = (cores_of(p.pid, before[p.pid], seconds) for p in (timed, outsider))
    finally:
        for loop in (timed, outsider):
            loop.kill()
            loop.wait()
    assert runs > 0.2 and outsiders > 0.2, (runs, outsiders)  # each had a share of a core, however busy the machine
    assert everyone_else.cores - window.cores == pytest.approx(runs, abs=0.1), (everyone_else.cores, window.cores, runs)
    assert window.cores >= outsiders - 0.1, (window.cores, outsiders)


def test_a_gate_that_freezes_nothing_measures_nothing():
    with RunGate().window([]) as others:
        assert others is None


def test_a_window_too_short_for_the_clock_ticks_measures_nothing():
    with processes.OthersCpu(lambda: [os.getpid()]) as others:
        time.sleep(0.05)
    assert others.cores is None


def test_a_process_of_ours_that_ends_during_a_window_is_not_counted_as_anothers():
    """Its CPU time so far stops showing in its own /proc entry when it ends; once reaped it shows
    in its parent's children's time instead (it once came out as 3.7 cores of other processes:
    more than the machine had). Held against the same window counting every process as another's,
    which no figure of others can exceed, whatever else keeps the machine busy."""
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.time() + 1.0\n"
                              "while time.time() < end: pass\nprint('spent', flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout.readline() == b"spent\n"  # its CPU time spent before the window, then waiting
    with processes.OthersCpu(lambda: []) as everyone, processes.OthersCpu(lambda: processes.tree(os.getpid())) as others:
        child.communicate(b"")  # it ends, and is reaped
        time.sleep(processes.OthersCpu.MIN_SECONDS)
    assert others.cores is not None and everyone.cores is not None
    assert others.cores <= everyone.cores + 0.1, (others.cores, everyone.cores)
