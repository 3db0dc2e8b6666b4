"""The GPU's measurement: outputs committed and timed apart, a settle after each checked call, the
device's busy time after a verified command charged to it, a fifth of a batch checked."""

import random
import time
from types import SimpleNamespace

from harness.judge import gpu as gpu_module
from harness.judge.timing.protocol import Timer
from harness.worker.protocol import Reply

from tests.fakes import FakeWorker, cpu, gpu, plan

def test_each_checked_call_and_only_those_is_followed_by_a_settle_before_the_next_timed_call():
    """The parent's copy of a checked output runs in its own CUDA context; the worker takes the
    GPU back outside any timed call, so the overhead the bound holds it to is the reference's."""
    worker, checked = FakeWorker(), []
    Timer(gpu(worker), plan(fixed=40), random.Random(3)).run(
        check=lambda calls: checked.extend(c.seed for c in calls), profiled=0)
    ops = [c.op for c in worker.commands]
    timed_seeds = [c.seeds[0] for c in worker.commands if c.op == "timed"]
    assert ops.count("settle") == len(checked) > 0 and ops[0] == "timed"
    for index, op in enumerate(ops):
        if op == "settle":  # right after the call it checked
            assert ops[index - 1] == "timed" and worker.commands[index - 1].seeds[0] in checked
    unchecked_then_timed = [a.seeds[0] for a, b in zip(worker.commands, worker.commands[1:]) if a.op == b.op == "timed"]
    assert not set(unchecked_then_timed) & set(checked) and len(timed_seeds) == 40
    on_cpu = FakeWorker()  # no CUDA contexts to switch between: nothing to settle
    Timer(cpu(on_cpu), plan(fixed=40), random.Random(3)).run(check=lambda calls: None, profiled=0)
    assert {c.op for c in on_cpu.commands} == {"timed"}


def test_a_settle_that_fails_ends_the_timing_with_its_reply():
    class FailsToSettle(FakeWorker):
        def request(self, command, phase):
            self.commands.append(command)
            if command.op == "settle":
                return Reply(ok=False, rejected="no")
            return Reply(ok=True, elapsed_ms=self.elapsed_ms, outputs=[])

    timed, failed = Timer(gpu(FailsToSettle()), plan(fixed=40), random.Random(3)).run(
        check=lambda calls: None, profiled=0)
    assert isinstance(failed, Reply) and failed.rejected == "no" and len(timed.reported_ms) < 40


def test_on_a_gpu_each_timed_command_is_followed_by_the_commit_of_its_outputs_timed_apart():
    class SlowCommit(FakeWorker):
        def request(self, command, phase):
            if command.op == "commit":
                time.sleep(0.004)
            return super().request(command, phase)

    worker = SlowCommit()
    timed, _ = Timer(gpu(worker), plan(fixed=3), random.Random(5), batch=4, cap=4).run(
        check=lambda calls: None, profiled=0)
    # The first command of a batched timing (after a pause) is made but not recorded.
    assert [op for op in worker.ops if op != "settle"] == ["timed", "commit"] * 4
    assert [c.calls for c in worker.commands if c.op == "timed"] == [4] * 4
    assert len(timed.reported_ms) == len(timed.commit_ms) == 3
    assert all(0.001 <= c <= w for c, w in zip(timed.commit_ms, timed.wall_ms))  # per call: 4 ms over 4 calls


def test_on_a_gpu_a_batchs_checked_calls_are_each_its_own_and_a_profiled_command_makes_one_call():
    """Each call of a GPU batch is described in turn; a profiled command makes one call there (each
    call of a batch has an L2 flush of the harness's, which the profile would count as the
    candidate's)."""
    worker, checked = FakeWorker(elapsed_ms=0.5), []
    timed, objection = Timer(gpu(worker), plan(fixed=4), random.Random(8), batch=6, cap=6).run(
        check=checked.append, profiled=2)
    assert objection is None and timed.profiled_batch == 1 and len(timed.profiles) == 2
    assert sorted(c.calls for c in worker.commands if c.op == "timed") == [1, 1] + [6] * 5  # the first one primes
    for calls in checked:
        handles = [call.outputs[0].ipc_handle for call in calls if len(call.outputs) == 1]
        assert len(set(handles)) == len(calls)  # each call's own outputs
    # Two calls of each of the four timed batches (the first one, uncounted, is not checked); a
    # profiled command's one call now and then.
    assert sorted(len(calls) for calls in checked if len(calls) > 1) == [2] * 4
    assert {len(calls) for calls in checked} <= {1, 2}


def test_a_gpu_batch_has_a_fifth_of_its_calls_checked_at_least_two_at_most_eight():
    """As many checks a call as one-call commands got after their first 20 (a fifth), where a
    timing of large batches makes few commands; the CPU's batches always eight."""
    assert [gpu(FakeWorker()).checked_calls(calls) for calls in (1, 2, 9, 20, 40, 1000)] == [1, 2, 2, 4, 8, 8]
    assert [cpu(FakeWorker()).checked_calls(calls) for calls in (1, 9, 1000)] == [1, 8, 8]


def test_on_a_gpu_the_time_a_verified_commands_work_keeps_the_gpu_busy_after_its_reply_is_its_own():
    """Kernels queued after the last call's end event would run while the parent reads the checked
    outputs, off the clock: the time the GPU stays busy with them goes to that command."""
    worker, drains = FakeWorker(elapsed_ms=0.5), []

    def drain():
        drains.append(len(worker.commands))
        return 6.0

    timed, _ = Timer(gpu(worker, drain=drain), plan(fixed=4), random.Random(8), batch=6, cap=6).run(
        check=lambda calls: None, profiled=0)
    assert len(drains) == 4  # every batch is verified (the first, uncounted, is not timed)
    assert all(wall >= 1.0 for wall in timed.wall_ms)  # 6 ms over its six calls, beyond what the clock saw
    unverified, _ = Timer(gpu(FakeWorker(elapsed_ms=0.5), drain=drain), plan(fixed=4), random.Random(8), batch=6,
                          cap=6).run(check=None, profiled=0)
    assert len(drains) == 4 and all(wall < 1.0 for wall in unverified.wall_ms)


def test_how_long_the_gpu_stays_busy_with_another_process_s_work_counts_from_the_first_look(monkeypatch):
    """Idle at the first look: nothing. Busy (a tiny kernel's round trip of milliseconds, the GPU
    running another context's work): until it is idle, or the whole wait."""
    monkeypatch.setattr(gpu_module, "IDLE_POLL_S", 0.002)
    runner = SimpleNamespace()

    def answering(*round_trips_ms):
        answers = iter(round_trips_ms)
        runner.request = lambda command, what: Reply(ok=True, elapsed_ms=next(answers))

    answering(0.013)
    assert gpu_module.busy_ms(runner, 0.1) == 0.0 and (answering(0.013) or gpu_module.idle_within(runner, 0.1))
    answering(2.4, 2.4, 0.013)
    assert 4.0 <= gpu_module.busy_ms(runner, 0.1) < 100.0  # two polls apart, at least
    answering(*[2.4] * 1000)
    assert gpu_module.busy_ms(runner, 0.01) == 10.0
    answering(*[2.4] * 1000)
    assert not gpu_module.idle_within(runner, 0.01)
