"""Stand-ins for a worker and its device's measurement, for tests of the timing protocol and the
measurements without a worker process."""

import contextlib
import time

from harness.cpu.measurement import CpuMeasurement
from harness.judge.gpu import GpuMeasurement
from harness.judge.timing.protocol import TimingPlan
from harness.worker.pace import Pace
from harness.worker.protocol import Profile, Reply, TensorRef


def ref(*shape: int) -> TensorRef:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return TensorRef(dtype="float32", shape=list(shape), stride=strides, storage_offset=0, device="cpu")


def gpu_ref(handle: int) -> TensorRef:
    return ref(2).model_copy(update={"device": "cuda", "ipc_handle": f"{handle:0128x}", "offset": 0})


def located(address):
    return ref(2).model_copy(update={"address": address})


class FakeWorker:
    """Replies to `timed` with a fixed time per call, taking `call_s` per call by the parent's
    clock, and where its outputs are (two floats per call: located on the CPU, committed call by
    call on a GPU, each call's in an allocation of its own); remembers the commands, and which it
    was asked for the profile of (`summarized`: the count of timed commands when each profile was
    asked for), answering those after `summary_s`. With a `clock` (FakeClock), a call's time passes
    on it instead of in a sleep: what the parent's clock sees then is exact, however busy the machine."""

    gpu: int | None = None  # no GPU of this process: a GPU measurement reads none of its state

    def __init__(self, elapsed_ms=1.0, summary_s=0.0, call_s=0.0, clock=None, unobserved_ms=0.0):
        """`unobserved_ms`: the work each stop finds it did between being signalled and stopping."""
        self.commands, self.elapsed_ms, self.summary_s, self.call_s = [], elapsed_ms, summary_s, call_s
        self.unobserved_ms = unobserved_ms
        self.clock = clock
        self.summarized: list[int] = []
        self.ops: list[str] = []  # every command's op, in order, with the parent's checks ("check")
        self.spoiled: list[list[int]] = []  # each `spoil`'s addresses
        self.sent = 0

    @contextlib.contextmanager
    def stopped_all(self, purpose):
        self.ops.append("stopped")
        yield self.unobserved_ms
        self.ops.append("resumed")

    def spoil(self, addresses, phase):
        self.ops.append("spoil")
        self.spoiled.append(addresses)

    def request(self, command, phase):
        self.ops.append(command.op)
        if command.op == "commit":  # the last timed command's outputs
            return Reply(ok=True, outputs=[gpu_ref(call) for call in range(command.calls)])
        if command.op == "release":
            return Reply(ok=True)
        if command.op == "profile":
            self.summarized.append(len(self.commands))
            time.sleep(self.summary_s)
            return Reply(ok=True, profile=Profile(ops=["aten::relu"], elapsed_ms=self.elapsed_ms * self.commands[-1].calls))
        self.commands.append(command)
        if self.clock is not None:
            self.clock.now += self.call_s * command.calls
        else:
            time.sleep(self.call_s * command.calls)
        if command.op == "timed" and command.locate:  # each call's two floats where it left them
            return Reply(ok=True, elapsed_ms=self.elapsed_ms * command.calls, outputs=[located(4096)],
                         addresses=[[4096 * (call + 1)] for call in range(command.calls)])
        return Reply(ok=True, elapsed_ms=self.elapsed_ms * command.calls)


class FakeClock:
    """The parent's clock, moved on only by a FakeWorker's calls (`patch` puts it in `module`)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def patch(self, monkeypatch, module) -> "FakeClock":
        monkeypatch.setattr(module, "time", self)
        return self


class FakeGate(Pace):
    """A gate whose window is `quiet()`."""

    def __init__(self, quiet=contextlib.nullcontext):
        self.quiet = quiet

    def window(self, timed):
        return self.quiet()


class FakeFeeder:
    """Feeds by `feed(seeds)`; nothing changed any input."""

    def __init__(self, feed):
        self._feed = feed

    def feed(self, target, seeds):
        return self._feed(seeds)

    def inputs_left(self, target, calls):
        return [None] * len(calls)


def cpu(worker, feed=None, quiet=contextlib.nullcontext, sparse=False, **choices) -> CpuMeasurement:
    """The CPU's measurement of `worker`, sampled sparsely only where asked (a FakeWorker has no
    process to sample)."""
    return CpuMeasurement(worker, FakeGate(quiet), [], FakeFeeder(feed) if feed else None, sparse=sparse, **choices)


def gpu(worker, drain=None) -> GpuMeasurement:
    """The GPU's measurement of `worker`; `drain()` in ms where its device stays busy after a reply."""
    measure = GpuMeasurement(worker)
    if drain is not None:
        measure.drained_ms = drain
    return measure


def plan(**change):
    values = dict(warmup=0, fixed=None, min_trials=5, max_trials=50, budget_s=10.0)
    return TimingPlan(**values | change)
