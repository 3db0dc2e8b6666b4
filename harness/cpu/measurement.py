"""A worker's timed commands on the CPU (the CPU's judge.timing.Measurement).

The outputs are not copied anywhere by the worker: the reply says where they are in its memory,
and the parent reads the checked ones from the stopped worker (a copy made in the candidate's
process could hide its work). Inputs are fed (feeding.py). A candidate's outputs get garbage
written into them before they are let go (`spoiled_words`). The run's other workers are frozen
around the timed calls (quiet.py), and the worker's threads are sampled from outside
(sampling.py): closely on a few commands chosen at random, whose times are not recorded, and
sparsely on all the others."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ContextManager

import torch

from ..judge.timing.measurement import Measurement
from ..judge.timing.timed import Timed
from ..worker import processes
from ..worker.pace import Pace
from ..worker.parent import Worker
from ..worker.protocol import ALLOWED_DTYPES, Command, Reply, TensorRef
from .feeding import Feeder
from .sampling import SPARSE_PERIOD_NS, CpuSamples, Sampler

# Calls of a profiled command, at most: a worker knows it is watched while it is (the profiler is
# on), so a smaller batch tells it nothing new, and a path slow only when watched costs so many
# calls, not a whole batch of them (a 0.1 s one once ran past the timeout in a batch of 1,024).
PROFILED_BATCH = 8
# Garbage words written into a timed command's outputs before they are let go (`spoiled_words`):
# one process_vm_writev of 1,024 pieces, 1.5 ms a command with the worker stopped and resumed on
# the 2-core VM.
SPOILED_WORDS, WORD = 1024, 4
# Timed commands sampled from outside instead of recorded, chosen like the profiled ones: sampling
# slows a call (about 10 us a sample on the 2-core VM, where a timer interrupt leaves the VM), so
# their times would bias the median. Two commands gave 350 to 21,000 samples for the main job's
# kernels and for a 0.1 ms softmax. Where fewer (a host whose sample rate makes the period longer,
# sampling.py: at 2,500 samples a second a 0.24 ms softmax reference gave 63 library samples in 8
# commands), the commands after them are sampled too until ENOUGH_SAMPLES were taken or they took
# SAMPLING_MOST_S (at 1,000 a second, half a second of the softmax gave 39 library samples, too few
# for the hidden-library check; a second, 113). By time, not commands: 32 commands of 8 calls gave
# it 24. Samples of work only (`Sampler.working`): beside a busy loop, the commands sampled of that
# softmax gave 952 samples, 37 of them in library code, most of the rest one thread waiting for the
# other.
SAMPLED_COMMANDS, ENOUGH_SAMPLES, SAMPLING_MOST_S = 2, 400, 1.0
# How long a timing goes on past its plan for its sparse samples: at most this. A 0.25 ms softmax
# reference spends 0.12 ms a call in library code, which 1,070 calls tell at 2 ms; feeding a
# command of 32 calls their fresh inputs took 0.1 s on the 2-core VM.
SPARSE_MOST_S = 2.0
# And while the library time its sparse calls show so far would convict, were they enough to tell
# it: at most this. Beside two busy loops a matmul candidate that did its own (slow) work whenever a
# probe took a busy moment for close sampling, and the reference's redispatched below the profiler
# otherwise, had 56 to 228 calls sampled sparsely in its timing (381 tell its 0.17 ms a call), and
# passed `ok` (2026-12-07). An honest candidate's calls show that much only where recorded operators
# explain it.
SPARSE_SUSPECT_MOST_S = 10.0


@dataclass(frozen=True)
class Sampled:
    """What a CPU timing gathered besides its times (`Timed.gathered`): where the worker's threads
    ran, sampled closely (None: not asked for, or refused) and sparsely, why either was refused,
    and the commands sampled closely (their calls are not among the timing's)."""

    close: CpuSamples | None
    sparse: CpuSamples | None
    refusal: str | None
    commands: int
    wall_ms: float


def sampled_of(timed: Timed | None) -> Sampled | None:
    """What a CPU timing gathered (None for any other)."""
    gathered = timed.gathered if timed is not None else None
    return gathered if isinstance(gathered, Sampled) else None


def spoiled_words(outputs: list[TensorRef], addresses: list[list[int]], rng: random.Random) -> list[int]:
    """Where to write garbage in a timed command's outputs before the worker lets them go: words at
    random in every call's outputs, SPOILED_WORDS in all (at least one in each output). A candidate
    that keeps a ring of outputs with their constant part written once, and returns each again
    later writing only the rest, returns garbage there (a padded relu's ring had scored 4.1x
    against an honest 1.0x, 2026-12-04); one that writes its outputs whole is not touched."""
    spans = []
    for call in addresses:
        for ref, address in zip(outputs, call):
            begin = address + ref.storage_offset * ALLOWED_DTYPES[ref.dtype].itemsize if ref.dtype in ALLOWED_DTYPES \
                else address
            if address + ref.span_bytes - begin >= WORD:
                spans.append((begin, address + ref.span_bytes))
    each = max(1, SPOILED_WORDS // max(1, len(spans)))
    return [begin + WORD * rng.randrange((end - begin) // WORD) for begin, end in spans for _ in range(each)]


class CpuMeasurement(Measurement):
    """One worker's timed commands on the CPU. `gate`: the run's pace, whose window freezes its
    other workers (all but the launchers `timed`); `feeder`: where its inputs come from (None: the
    worker makes them from the seeds); `spoil`:
    garbage goes into a command's outputs before they are let go (a candidate's, not the trusted
    reference's, which may return a buffer of its own); `sample`: its threads are sampled closely
    in commands chosen at random (`Sampled.close`). With `sparse` they are sampled sparsely on all
    the other commands too, the profiled ones excepted, at SPARSE_PERIOD_NS (`Sampled.sparse`): too rarely
    for a candidate to notice, so one cannot do its own work only while sampled closely. Where
    those calls are too few to tell library CPU time of `tell_library_ms` a call, the timing goes
    on past its plan, for SPARSE_MOST_S at most (SPARSE_SUSPECT_MOST_S while they show that much
    so far), or until they are `sparse_enough` samples of work
    in all (a trusted reference's, whose work is all on its calls: a candidate's other threads
    could take them spinning)."""

    profiled_most = PROFILED_BATCH
    locates = True

    def __init__(self, worker: Worker, gate: Pace, timed: list[int], feeder: Feeder | None, spoil: bool = False,
                 sample: bool = False, sparse: bool = True, tell_library_ms: float = 0.0,
                 sparse_enough: int | None = None, rng: random.Random | None = None):
        super().__init__(worker)
        self.gate, self.timed, self.feeder, self.spoil = gate, timed, feeder, spoil
        self.sample, self.sparse = sample, sparse
        self.tell_library_ms, self.sparse_enough = tell_library_ms, sparse_enough
        self.rng = rng or random.SystemRandom()
        self._close: Sampler | None = None  # during a timing that samples the worker closely
        self._sparse: Sampler | None = None  # and sparsely
        self._planned = self._sampled = 0  # commands chosen to be sampled closely, and sampled so far
        self._sampled_wall_ms = 0.0
        # The last timed command's outputs, held where they are until `release`: their
        # descriptions and each call's addresses.
        self._located: tuple[list[TensorRef], list[list[int]]] | None = None

    def quiet(self) -> ContextManager:
        return self.gate.window(self.timed)

    @contextlib.contextmanager
    def window(self, timed: Timed) -> Iterator[None]:
        self._sampled, self._sampled_wall_ms = 0, 0.0
        with self.quiet() as others, self._sampling() as (close, sparse):
            yield
        timed.others_cores = others.cores if isinstance(others, processes.OthersCpu) else None
        timed.gathered = Sampled(close=close.samples if close is not None else None,
                                 sparse=sparse.samples if sparse is not None else None,
                                 refusal=next((s.refusal for s in (close, sparse) if s is not None and s.refusal), None),
                                 commands=self._sampled, wall_ms=self._sampled_wall_ms)

    @contextlib.contextmanager
    def _sampling(self) -> Iterator[tuple[Sampler | None, Sampler | None]]:
        def pids() -> list[int]:
            return processes.tree(self.worker.worker_pid)
        with Sampler(pids) if self.sample else contextlib.nullcontext() as self._close, \
                Sampler(pids, least_ns=SPARSE_PERIOD_NS) if self.sparse else contextlib.nullcontext() as self._sparse:
            try:
                yield self._close, self._sparse
            finally:
                self._close = self._sparse = None

    def inputs(self, seeds: list[int]) -> list[TensorRef] | None:
        return self.feeder.feed(self.worker, seeds) if self.feeder is not None else None

    def inputs_left(self, calls: list[tuple[int, list[TensorRef]]]) -> list[list[torch.Tensor] | None]:
        return self.feeder.inputs_left(self.worker, calls) if self.feeder is not None else [None] * len(calls)

    def reading_checked(self, fed: bool) -> ContextManager:
        """Fed inputs and outputs read in one stop: a worker resumed between the two could tell
        from its caches which calls were read first, and mend what is read next."""
        return self.worker.stopped_all("its checked calls to be read during timing") if fed else contextlib.nullcontext()

    def watching(self, calls: int, profile: bool, sampled: bool) -> ContextManager:
        if sampled:
            return self._close.watching(calls)
        if self._sparse is not None and not profile:
            return self._sparse.watching(calls)
        return contextlib.nullcontext()

    def stopped_at_reply(self, phase: str) -> ContextManager[float]:
        """The worker's whole tree stopped: a candidate that returns its outputs unfinished and
        finishes them on other threads once the reply is out has them read as they were (and a
        thousand idle threads of its own no longer lengthen the time before they stop: the parent
        walked them, and closed its sampling, first). The CPU time its processes spent meanwhile
        is charged to the command."""
        return self.worker.stopped_all(f"its reply to be looked at during {phase}")

    def handed_over(self, reply: Reply, calls: int, phase: str) -> tuple[Reply, float]:
        """Nothing is handed over: the outputs stay where the reply says until `let_go`."""
        self._located = (reply.outputs or [], reply.addresses or []) if reply.ok else None
        return reply, 0.0

    def outputs_of(self, reply: Reply, index: int, calls: int) -> list[TensorRef]:
        return [ref.model_copy(update={"address": address}) for ref, address in zip(reply.outputs, reply.addresses[index])]

    def let_go(self, phase: str) -> Reply:
        """The last timed command's outputs, held where they are for the parent to read, let go
        (the worker frees them on no clock), spoiled first where asked."""
        if self._located is None:
            return Reply(ok=True)
        (outputs, addresses), self._located = self._located, None
        if self.spoil and (words := spoiled_words(outputs, addresses, self.rng)):
            self.worker.spoil(words, phase)
        return self.worker.request(Command(op="release"), phase)

    @property
    def _sampling_now(self) -> bool:
        return self._close is not None and self._close.active

    def sampled_commands(self) -> int:
        self._planned = SAMPLED_COMMANDS if self._sampling_now else 0
        return self._planned

    def samples_next(self, chosen: bool, profiled: bool) -> bool:
        return chosen or (not profiled and self._sampled >= self._planned and self.wants_more())

    def unrecorded(self, timed: Timed, wall_ms: float) -> None:
        self._sampled += 1
        self._sampled_wall_ms += wall_ms

    def wants_more(self) -> bool:
        """More commands are to be sampled closely: the chosen ones first, then more while the
        samples kept are fewer than two commands' or too few to tell (a host's low sample rate;
        none kept where the kernel throttled sampling and it started over)."""
        if not self._sampling_now:
            return False
        close = self._close
        return close.blocks < SAMPLED_COMMANDS or (close.working < ENOUGH_SAMPLES and close.watched_s < SAMPLING_MOST_S)

    def goes_on(self, planned_at: float) -> bool:
        """Whether the calls sampled sparsely are too few to tell `tell_library_ms` a call, within
        SPARSE_MOST_S of the plan's end, or SPARSE_SUSPECT_MOST_S while they show that much."""
        sparse = self._sparse
        if sparse is None or not sparse.active or not self.tell_library_ms:
            return False
        if sparse.tells(self.tell_library_ms) or (self.sparse_enough is not None and sparse.working >= self.sparse_enough):
            return False
        past_s = time.monotonic() - planned_at
        return past_s < SPARSE_MOST_S or \
            (past_s < SPARSE_SUSPECT_MOST_S and sparse.so_far().library_ms_per_call >= self.tell_library_ms)
