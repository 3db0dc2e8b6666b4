"""What the parent accepts from a worker: a reply of the kind its command asks for, and a failed
one only when it says what failed."""

from harness.records import Phase
from harness.worker.protocol import Command, Failure, Reply, fits, says_why


def test_a_failed_reply_must_say_what_failed():
    assert says_why(Reply(ok=True))
    raised = Failure(exc_type="RuntimeError", message="boom", phase=Phase.timing, traceback=[])
    assert says_why(Reply(ok=False, failure=raised))
    assert says_why(Reply(ok=False, rejected="outputs are a tensor subclass"))
    assert not says_why(Reply(ok=False))
    assert not says_why(Reply(ok=False, rejected=""))


def test_a_successful_reply_carries_what_its_command_asks_for():
    assert fits(Command(op="timed"), Reply(ok=True, elapsed_ms=1.0, outputs=[]))
    assert not fits(Command(op="timed"), Reply(ok=True, outputs=[]))
    assert fits(Command(op="settle"), Reply(ok=True))
