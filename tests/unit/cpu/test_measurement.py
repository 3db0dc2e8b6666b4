"""The CPU's measurement: outputs read where the worker left them, spoiled, then let go on no
clock; inputs fed; the run's other workers quiet around the timed calls."""

import contextlib
import random

from harness.cpu.measurement import SPOILED_WORDS, WORD, spoiled_words
from harness.judge.timing.protocol import Timer
from harness.worker import processes

from tests.fakes import FakeWorker, cpu, plan, ref

def test_on_the_cpu_outputs_are_read_where_they_are_then_let_go_on_no_clock():
    """No commit: a candidate could do its work in one, inside the allowance for the reference's
    (a fused relu written into the commit buffer scored 35x to 126x; red team)."""
    worker = FakeWorker()
    timed, _ = Timer(cpu(worker, spoil=True), plan(fixed=3), random.Random(5), batch=4, cap=4).run(
        check=lambda calls: worker.ops.append("check"), profiled=0)
    # The first command of a batched timing (after a pause) is made but not recorded or checked.
    # Each is stopped as its reply comes in; a verified one stays stopped until its check is done.
    assert worker.ops == ["timed", "stopped", "resumed"] + ["spoil", "release", "timed", "stopped", "check", "resumed"] * 3 \
        + ["spoil", "release"]
    assert all(c.locate for c in worker.commands) and timed.commit_ms == [] and len(timed.wall_ms) == 3


def test_work_a_worker_did_between_its_reply_and_its_stop_is_charged_to_its_command():
    """A candidate that replies at once and finishes its outputs on other threads has them read as
    they were when it stopped, and the CPU time it spent before stopping counts as its command's."""
    honest, busy = FakeWorker(), FakeWorker(unobserved_ms=40.0)
    quick, _ = Timer(cpu(honest), plan(fixed=3), random.Random(5), batch=4, cap=4).run(check=lambda calls: None, profiled=0)
    charged, _ = Timer(cpu(busy), plan(fixed=3), random.Random(5), batch=4, cap=4).run(check=lambda calls: None, profiled=0)
    assert max(quick.wall_ms) < 5.0 and min(charged.wall_ms) >= 10.0  # 40 ms a command of 4 calls
    assert charged.reported_ms == quick.reported_ms


def test_on_the_cpu_outputs_are_spoiled_after_they_are_read_and_before_they_are_let_go():
    """Garbage at random in every call's outputs: a ring of outputs whose constant part was
    written once, returned again later with only the rest written, shows it when checked (a
    padded relu's had scored 4.1x against an honest 1.0x). Within the outputs, and a bounded
    number of words however many calls."""
    worker = FakeWorker()
    Timer(cpu(worker, spoil=True), plan(fixed=3), random.Random(5), batch=4, cap=4).run(check=lambda calls: None, profiled=0)
    spans = [(4096 * (call + 1), 4096 * (call + 1) + 8) for call in range(4)]  # each call's two floats
    assert len(worker.spoiled) == 4  # every command's, the unrecorded first one's too
    for addresses in worker.spoiled:
        assert all(any(begin <= a and a + WORD <= end for begin, end in spans) for a in addresses)
        assert {a // 4096 for a in addresses} == {1, 2, 3, 4} and all(a % WORD == 0 for a in addresses)
    trusted = FakeWorker()  # the reference's outputs are not spoiled: it may return a buffer of its own
    Timer(cpu(trusted), plan(fixed=3), random.Random(5), batch=4, cap=4).run(check=lambda calls: None, profiled=0)
    assert trusted.spoiled == []
    many = spoiled_words([ref(1 << 16)], [[1 << 30]] * 10_000, random.Random(1))
    assert len(many) == 10_000  # a word a call where SPOILED_WORDS cannot go round
    few = spoiled_words([ref(1 << 16)], [[1 << 30]], random.Random(1))
    assert len(few) == SPOILED_WORDS and len(set(few)) > SPOILED_WORDS // 2


def test_a_timing_window_keeps_what_other_processes_used_meanwhile():
    meter = processes.OthersCpu(lambda: [])

    @contextlib.contextmanager
    def quiet():
        yield meter
        meter.cores = 1.25  # measured as the window closes

    timed, _ = Timer(cpu(FakeWorker(), quiet=quiet), plan(fixed=3), random.Random(1)).run(profiled=0)
    assert timed.others_cores == 1.25
    unmeasured, _ = Timer(cpu(FakeWorker()), plan(fixed=3), random.Random(1)).run(profiled=0)
    assert unmeasured.others_cores is None
