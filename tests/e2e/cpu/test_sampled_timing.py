"""A CPU timing that samples its worker's threads from outside (a real child process, perf
events): which commands are sampled, closely and sparsely, and how long a timing goes on for its
samples."""

import os
import random
import re
import subprocess
import sys
import time

import pytest

from harness.cpu import sampling
from harness.cpu.measurement import (ENOUGH_SAMPLES, SAMPLED_COMMANDS, SAMPLING_MOST_S, SPARSE_MOST_S, SPARSE_SUSPECT_MOST_S,
                                     sampled_of)
from harness.judge.timing.protocol import Timer
from harness.judge.timing.timed import Timed

from tests.fakes import FakeWorker, cpu, plan

class SampledWorker(FakeWorker):
    """A FakeWorker whose process, sampled from outside, is `pid`; `cpu_s`: the CPU time that
    process was given during the timing (on a busy host, less than the timing's wall time)."""

    def __init__(self, pid, call_s=0.0):
        super().__init__(call_s=call_s)
        self.worker_pid = pid
        self.cpu_s = 0.0


def cpu_s_of(pid: int) -> float:
    """The CPU time a live process has used so far (user and system)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sampled_timing(child_code: str, call_s: float, budget_s: float = 10.0, **sampling_args) -> tuple[Timed, SampledWorker]:
    """A timing of 6 recorded commands of 4 calls, 2 profiled, sampled closely (or as
    `sampling_args` say), where the worker's process runs `child_code` (once started)."""
    with subprocess.Popen([sys.executable, "-c", "print('ready', flush=True)\n" + child_code], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "ready\n"  # started: its start-up is not what is sampled
        worker = SampledWorker(child.pid, call_s)
        timer = Timer(cpu(worker, **{"sample": True, "sparse": False} | sampling_args), plan(fixed=6, budget_s=budget_s),
                      random.Random(3), batch=4, cap=4)
        began_cpu_s = cpu_s_of(child.pid)
        timed, _ = timer.run(profiled=2)
        worker.cpu_s = cpu_s_of(child.pid) - began_cpu_s
        child.kill()
    if (sampled_of(timed).close or sampled_of(timed).sparse) is None:
        pytest.skip("this host does not let the harness sample a child process (perf_event_paranoid, seccomp)")
    return timed, worker


def test_two_commands_at_random_among_the_first_are_sampled_from_outside_and_not_recorded():
    """Sampling slows a call (a timer interrupt per sample), so a sampled command's time is not
    the candidate's: it is made besides the recorded ones, like a profiled one, and the worker is
    not told."""
    # Calls long enough for two commands to take ENOUGH_SAMPLES twice over at the host's period.
    period_s = sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, worker = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert len(timed.reported_ms) == 6 and len(timed.profiles) == 2
    assert sampled_of(timed).commands == SAMPLED_COMMANDS and sampled_of(timed).close.calls == 4 * SAMPLED_COMMANDS
    assert sampled_of(timed).close.samples >= ENOUGH_SAMPLES
    assert len(worker.commands) == 1 + 6 + 2 + SAMPLED_COMMANDS  # the first, unrecorded batch too
    unsampled, _ = Timer(cpu(FakeWorker()), plan(fixed=6), random.Random(3), batch=4, cap=4).run(profiled=2)
    assert sampled_of(unsampled).close is None and sampled_of(unsampled).commands == 0


def test_a_command_whose_sampling_the_kernel_throttled_is_sampled_again(monkeypatch):
    """Its samples say too little (worker/sampling.py): sampling starts over at a longer period, and
    commands are sampled until two are kept."""
    drained, throttles = sampling._drained, iter([1])
    monkeypatch.setattr(sampling, "_drained", lambda ring: (*drained(ring)[:2], next(throttles, 0)))
    period_s = 2 * sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, worker = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert sampled_of(timed).close.throttled == 1 and sampled_of(timed).commands == SAMPLED_COMMANDS + 1
    assert sampled_of(timed).close.calls == 4 * SAMPLED_COMMANDS  # the throttled command's left out
    assert len(timed.reported_ms) == 6 and len(worker.commands) == 1 + 6 + 2 + SAMPLED_COMMANDS + 1


SPARSE_PERIOD_MS = sampling.period_for(sampling.max_sample_rate(), sampling.SPARSE_PERIOD_NS) / 1e6


def test_every_other_command_is_sampled_sparsely_so_a_candidate_cannot_tell_when_it_is_watched():
    """Closely sampled calls run slower, which a candidate can notice; sparsely, every command but
    the profiled and the closely sampled ones (the first, unrecorded batch included) is sampled
    alike."""
    timed, worker = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert sampled_of(timed).sparse.period_ms == SPARSE_PERIOD_MS
    sparse_calls, calls = 4 + 4 * 6, 4 + 4 * 6 + 4 * 2 + 4 * SAMPLED_COMMANDS
    assert sampled_of(timed).sparse.calls == sparse_calls and sampled_of(timed).close.calls == 4 * SAMPLED_COMMANDS
    # The spinning process's CPU time during the sparse calls, their share of all calls: on an idle
    # host their wall time, on a busy one less.
    sparse_cpu_ms = worker.cpu_s * 1000 * sparse_calls / calls
    assert sampled_of(timed).sparse.samples * SPARSE_PERIOD_MS == pytest.approx(sparse_cpu_ms, rel=0.3)
    assert timed.stopped == "fixed"  # no library time to tell: the plan alone decides
    alone, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True, sample=False)
    assert sampled_of(alone).close is None and sampled_of(alone).sparse.calls == 4 + 4 * 6


def test_the_samplers_reading_of_its_events_is_not_on_the_wall_clock(monkeypatch):
    """Once the reply is in, the sampler disables its events (one for each of the worker's threads
    and CPUs) and reads their rings: not the worker's time (600 idle threads had made a softmax's
    wall 0.8 ms a call longer, and its timing was flagged as disagreeing with the clock)."""
    drained = sampling._drained

    def slow(ring):
        time.sleep(0.05)
        return drained(ring)
    monkeypatch.setattr(sampling, "_drained", slow)
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sparse=True)
    assert sampled_of(timed).sparse is not None and max(timed.wall_ms) < 5 + 5  # 50 ms a ring: 12.5 ms a call or more


def test_a_timing_says_why_its_worker_could_not_be_sampled(monkeypatch):
    """Sparsely refused (its threads more than the harness may open events for), closely sampled:
    the refusal is kept beside the samples taken, for the judge to weigh."""
    opened = []

    def refuse_the_second(self, attr, threads):
        opened.append(self)
        if len(opened) == 2:
            return OSError(24, "Too many open files", "perf_event_open")
        return open_events(self, attr, threads)
    open_events = sampling.Sampler._open_events
    monkeypatch.setattr(sampling.Sampler, "_open_events", refuse_the_second)
    timed, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert sampled_of(timed).sparse is None and sampled_of(timed).close is not None
    assert sampled_of(timed).refusal == "perf_event_open: Too many open files"
    plain, _ = sampled_timing("while True: pass", call_s=0.02, sparse=True)
    assert sampled_of(plain).refusal is None


def test_timing_goes_on_until_its_sparse_samples_can_tell_the_library_time_asked_for():
    """Too few calls sampled sparsely would let hidden library work pass unseen: the timing goes on
    past its plan until they tell `tell_library_ms` a call (SAMPLES_TO_TELL samples of it)."""
    tell_ms = 1.0
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sparse=True, tell_library_ms=tell_ms)
    calls = sampled_of(timed).sparse.calls
    assert timed.stopped == "sampling" and sampled_of(timed).sparse.tells(tell_ms)
    assert tell_ms * (calls - 4) < sampling.SAMPLES_TO_TELL * SPARSE_PERIOD_MS  # a command fewer would not
    assert len(timed.reported_ms) == (calls - 4) // 4 > 6  # recorded: more trials than the plan's


def test_a_trusted_timing_stops_going_on_once_its_sparse_samples_are_enough_in_all():
    """A reference's work is all on its calls: samples enough in all say its library time too."""
    enough = round(0.3 / (SPARSE_PERIOD_MS / 1e3))  # 0.3 s of the busy child's time: the plan's commands take 0.14 s
    timed, _ = sampled_timing("while True: pass", call_s=0.005, sample=False, sparse=True, tell_library_ms=1e-6,
                              sparse_enough=enough)
    assert timed.stopped == "sampling" and enough <= sampled_of(timed).sparse.samples < 1.3 * enough  # 20 ms a command


def test_timing_goes_on_for_its_sparse_samples_a_while_past_its_plan_at_most():
    began = time.monotonic()
    timed, _ = sampled_timing("import sys; sys.stdin.read()", call_s=0.005, sample=False, sparse=True,
                              tell_library_ms=1e-6)
    assert timed.stopped == "sampling" and not sampled_of(timed).sparse.tells(1e-6)
    assert SPARSE_MOST_S <= time.monotonic() - began < SPARSE_MOST_S + 1.0  # the plan's 10 commands: 0.2 s


def test_timing_goes_on_longer_while_its_sparse_samples_show_the_library_time_asked_for_in_too_few_calls():
    """Library time that would convict, in calls too few to tell it (a busy host slows them), keeps
    the timing going past SPARSE_MOST_S, for SPARSE_SUSPECT_MOST_S at most: here every call's
    5 ms are a matmul's, and 0.02 ms a call would take 3,200 calls to tell."""
    began = time.monotonic()
    timed, _ = sampled_timing("import torch\ntorch.set_num_threads(1)\nx = torch.randn(256, 256)\n"
                              "while True: torch.mm(x, x)", call_s=0.005, sample=False, sparse=True, tell_library_ms=0.02)
    sparse = sampled_of(timed).sparse
    assert timed.stopped == "sampling" and not sparse.tells(0.02) and sparse.library_ms_per_call >= 0.02, sparse
    assert SPARSE_SUSPECT_MOST_S <= time.monotonic() - began < SPARSE_SUSPECT_MOST_S + 1.5


def test_samples_of_waiting_in_a_thread_pools_runtime_do_not_end_the_sampling(monkeypatch):
    """Beside a busy loop, most of a two-thread softmax's samples are one thread waiting in OpenMP's
    runtime for the other: not work. Here all of the busy child's code counts as such a runtime, so
    however many samples two commands take, more are sampled, for SAMPLING_MOST_S."""
    monkeypatch.setattr(sampling, "THREAD_RUNTIME", re.compile(r"."))
    period_s = sampling.period_for(sampling.max_sample_rate()) / 1e9
    timed, _ = sampled_timing("while True: pass", call_s=max(0.02, ENOUGH_SAMPLES * period_s / 4))
    assert sampled_of(timed).close.samples >= ENOUGH_SAMPLES and sampled_of(timed).commands > SAMPLED_COMMANDS
    assert SAMPLING_MOST_S * 1000 <= sampled_of(timed).wall_ms < SAMPLING_MOST_S * 1000 + 200


def test_commands_are_sampled_until_their_samples_are_enough_to_tell_or_for_a_second():
    """Where the host's sample rate makes the period long, two commands say too little: more are
    sampled, for SAMPLING_MOST_S of commands at most."""
    timed, worker = sampled_timing("import sys; sys.stdin.read()", call_s=0.02)  # idle: few samples
    assert sampled_of(timed).close.samples < ENOUGH_SAMPLES
    assert SAMPLING_MOST_S * 1000 <= sampled_of(timed).wall_ms < SAMPLING_MOST_S * 1000 + 200  # 80 ms a command
    assert len(timed.reported_ms) == 6 and len(worker.commands) == 1 + 6 + 2 + sampled_of(timed).commands
