"""Building ahead: what a failed build's outcome keeps of the worker's failure."""

from harness.builds.ahead import kept_failure
from harness.records import Phase
from harness.worker.protocol import MAX_LINE_CHARS, MAX_MESSAGE_CHARS, Failure


def test_a_failure_kept_for_the_cache_names_where_the_sources_are_kept_and_stays_readable():
    """The compiler's paths (the worker's view) are rewritten to the key dir, which is longer; a
    message already at the protocol's bound must stay within it, or the stored outcome would never
    be read back and the failed build would run again on every run."""
    seen, now = "/tmp/harness-worker-0/ext", "/home/user/.cache/harness/extensions/0123456789abcdef01234567"
    line = f"{seen}/conv/cuda.cu(12): error: identifier \"x\" is undefined\n"
    message = (line * (MAX_MESSAGE_CHARS // len(line) + 1))[:MAX_MESSAGE_CHARS]
    failure = Failure(phase=Phase.load, exc_type="RuntimeError", message=message,
                      traceback=[(f"{seen}/conv/main.cpp " * 40)[:MAX_LINE_CHARS]], sources={"cuda.cu": "int x;"})
    kept = kept_failure(failure, seen, now)
    assert kept.message.startswith(f"{now}/conv/cuda.cu(12)") and seen not in kept.message
    assert len(kept.message) == MAX_MESSAGE_CHARS and len(kept.traceback[0]) == MAX_LINE_CHARS
    assert Failure.model_validate_json(kept.model_dump_json()) == kept and kept.sources == failure.sources
