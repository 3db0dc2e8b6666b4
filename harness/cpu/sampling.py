"""Where a worker's threads spend their CPU time, seen from outside: the kernel samples each
thread's program counter (perf events on its task clock, user space only), and the parent maps
every sample to the file whose code it lay in. The worker cannot switch this off, and nothing of
it runs in its process: a sampled call is slower, by the kernel's interrupts only.

Where the host forbids it (perf_event_paranoid above 2, a seccomp profile, a worker the harness
may not trace) `Sampler.samples` stays None and the rules that read it do not apply."""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import errno
import functools
import math
import mmap
import os
import re
import resource
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from pydantic import BaseModel

_libc = ctypes.CDLL(None, use_errno=True)
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}.get(os.uname().machine)

# struct perf_event_attr, as far as these fields (PERF_ATTR_SIZE_VER5 and later accept 112 bytes).
ATTR_BYTES = 112
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK = 1, 1
PERF_SAMPLE_IP = 1 << 0
DISABLED, INHERIT, EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_SET_OUTPUT = 0x2400, 0x2401, 0x2405
PERF_FLAG_FD_CLOEXEC = 1 << 3
PERF_RECORD_LOST, PERF_RECORD_THROTTLE, PERF_RECORD_SAMPLE = 2, 5, 9
DATA_HEAD_OFFSET = 1024  # struct perf_event_mmap_page: data_head, then data_tail
PAGE_BYTES = mmap.PAGESIZE
RING_PAGES = 64  # a power of two: 256 KiB a CPU, 16,384 samples (16 bytes each), 0.8 s of CPU time a command

# Sampling period, in nanoseconds of a thread's CPU time: a call of 0.1 ms in the library gets two.
# A sample costs the worker about 10 us on the 2-core VM (a timer interrupt in a VM), so sampled
# calls are slower and their times are not used (measurement.py).
PERIOD_NS = 50_000
# The kernel throttles an event that fires more than perf_event_max_sample_rate / HZ times in a
# tick until the next one, and lowers that rate itself where its interrupts run long (a VM's): at
# 5,000 a second the 50 us events kept a quarter of their samples, and a reference's library time a
# call came out at 0.07 ms instead of 0.29. A period of twice the rate's interval fires at most half
# that often, whatever HZ is (a rate lowered while a timing is sampled: `Sampler.watching`).
MAX_SAMPLE_RATE = "/proc/sys/kernel/perf_event_max_sample_rate"
# Beyond this period a timing's sampled commands (measurement.py) take too few samples to tell: at
# 1,000 a second (2 ms) a second of a 0.2 ms softmax reference gave 113 library samples, where the
# hidden-library check (checks/hidden_library.py) wants 64.
LONGEST_PERIOD_NS = 2_000_000
# Files left free for the harness's other threads while a sampler holds its events (a build, the
# watchdog reading /proc, a worker's pipes).
RESERVED_FILES = 256
# A period too long for the worker to notice, at which every recorded timed command is sampled
# (measurement.py): at PERIOD_NS a sample cost about 18 us on the 2-core VM, so sampled calls ran
# 1.15x to 2.2x as long (0.2 ms of Python 1.29x-1.83x, a softmax on two threads 1.15x-1.89x), which
# a candidate timing a probe of its own tells apart, to do its own work only when watched closely
# (e2e test). Here a sample costs it 0.9% of its CPU time there, one call in 13 of 0.15 ms gets 18
# us more, and its calls' own noise is larger. Longer would need more calls than timing makes.
SPARSE_PERIOD_NS = 2_000_000
# Library CPU time a call is told apart from none where the calls sampled would give it this many
# samples: an honest candidate with a tenth of it (0.1 of 32 expected: 3.2) reaches 32 with a
# probability under 1e-9, and half of it (16 expected) four standard deviations short.
SAMPLES_TO_TELL = 32

# Code that computes for PyTorch, by the file it lies in: its CPU kernels (libtorch_cpu, with
# oneDNN and Sleef linked in) and its core, and BLAS, oneDNN and NumPy where a candidate loads them
# itself. Not the interpreter, libc, the Python bindings or the thread pools' runtimes, whose time
# any candidate has. A thread in a runtime's code mostly waits for others, spinning: beside a busy
# loop on the 2-core VM, 52% to 94% of a two-thread softmax's samples lay in libgomp.
TORCH_LIB = re.compile(r"/torch/lib/[^/]+$")
NUMPY_LIB = re.compile(r"/(numpy|scipy)(\.libs|/.*)?/[^/]+\.so[^/]*$")
NUMERIC_LIB = re.compile(r"/lib(mkl|dnnl|mkldnn|openblas|blas|cblas|lapack|fbgemm|sleef)[^/]*$")
NOT_LIBRARY = re.compile(r"/lib(torch_python|shm|caffe2_nvrtc|torch_global_deps)[.-][^/]*$")
THREAD_RUNTIME = re.compile(r"/lib(gomp|iomp5|omp)[.-][^/]*$")


class CpuSamples(BaseModel):
    """What the sampling saw: samples of the watched threads' CPU time in user space, and how many
    of them lay in PyTorch's or a numeric library's compute code."""

    period_ms: float
    samples: int = 0
    library: int = 0
    lost: int = 0  # samples a full ring had no room for
    # Times the kernel stopped an event for the rest of a tick, so sampling started over at a longer
    # period (`Sampler.watching`): none of the samples above was throttled.
    throttled: int = 0
    calls: int = 0  # forward calls made while sampled
    cores: int = 1  # the cores the sampled process may run on: CPU time is at most this many times wall time

    def tells(self, ms_per_call: float) -> bool:
        return tells(ms_per_call, self.calls, self.period_ms)

    @property
    def library_ms_per_call(self) -> float:
        """CPU time in library compute code per call, all threads together: a period a sample
        (samples a full ring lost counted in the same proportion)."""
        return self._ms_per_call(self.library)

    @property
    def cpu_ms_per_call(self) -> float:
        """CPU time per call, all threads together, wherever it ran."""
        return self._ms_per_call(self.samples)

    def _ms_per_call(self, samples: int) -> float:
        if not self.calls or not self.samples:
            return 0.0
        return samples * (self.samples + self.lost) / self.samples * self.period_ms / self.calls


def tells(ms_per_call: float, calls: int, period_ms: float) -> bool:
    """Whether library CPU time of `ms_per_call` a call would show in SAMPLES_TO_TELL samples or
    more over `calls` sampled every `period_ms`."""
    return ms_per_call * calls >= SAMPLES_TO_TELL * period_ms


def period_for(max_sample_rate: int | None, least_ns: int = PERIOD_NS) -> int:
    """The sampling period, in ns of a thread's CPU time, `least_ns` or longer, at which the kernel
    throttles no event (see MAX_SAMPLE_RATE)."""
    return max(least_ns, 2_000_000_000 // max_sample_rate) if max_sample_rate else least_ns


def max_sample_rate() -> int | None:
    try:
        with open(MAX_SAMPLE_RATE) as setting:
            return int(setting.read())
    except (OSError, ValueError):
        return None


def is_library(path: str) -> bool:
    """Whether code mapped from `path` computes for PyTorch or is a numeric library."""
    if NOT_LIBRARY.search(path) or THREAD_RUNTIME.search(path):
        return False
    return any(kind.search(path) for kind in (TORCH_LIB, NUMPY_LIB, NUMERIC_LIB))


def _attr(period_ns: int) -> ctypes.Array:
    attr = bytearray(ATTR_BYTES)
    struct.pack_into("IIQQQQ", attr, 0, PERF_TYPE_SOFTWARE, ATTR_BYTES, PERF_COUNT_SW_TASK_CLOCK, period_ns,
                     PERF_SAMPLE_IP, 0)
    struct.pack_into("Q", attr, 40, DISABLED | INHERIT | EXCLUDE_KERNEL | EXCLUDE_HV)
    return ctypes.create_string_buffer(bytes(attr), ATTR_BYTES)


def _threads(pids: Iterable[int]) -> list[int]:
    threads = []
    for pid in pids:
        try:
            threads += [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue  # gone
    return threads


class Sampler:
    """Samples the threads of the processes `pids()` names (and the threads and processes they
    start) inside each `watching()` block between `__enter__` and `__exit__`; then `samples`
    says what they ran there, or stays None where sampling is refused. One event per thread and
    CPU (the kernel follows new threads only for events bound to a CPU), all of one CPU's
    writing into one ring, emptied after each block (a full ring drops samples). `period_ns`:
    by default the longer of `least_ns` and what the host's sample rate allows (`period_for`)."""

    def __init__(self, pids: Callable[[], list[int]], period_ns: int | None = None, least_ns: int = PERIOD_NS):
        self.pids, self.period_ns, self.least_ns = pids, period_ns, least_ns
        self.samples: CpuSamples | None = None
        self.refusal: str | None = None  # why the threads could not be sampled
        self.blocks = self.calls = 0  # watched blocks whose samples are kept, and their calls
        self.watched_s = 0.0  # their time
        self._events: list[int] = []
        self._rings: list[mmap.mmap] = []
        self._ips: Counter[int] = Counter()
        self._lost = self._throttled = 0
        self._waiting = 0  # samples kept that lay in a thread pool's runtime
        self._code: list[Region] = []  # the watched processes' code, read again where a sample lies outside it
        self._cores = 1

    def __enter__(self) -> Sampler:
        if _NR_PERF_EVENT_OPEN is None:
            self.refusal = f"no perf_event_open number known for {os.uname().machine}"
            return self
        self._open(self.period_ns or period_for(max_sample_rate(), self.least_ns))
        return self

    def _open(self, period_ns: int) -> None:
        """One event per thread and CPU, as files of this process: only where they leave
        RESERVED_FILES free, its soft limit on open files raised to the hard one where that makes
        room. A candidate's 600 idle threads on two CPUs had put its calls out of sight behind the
        usual soft limit of 1,024 (where the reference's sampling would convict, checks/unsampled.py
        skips such a candidate); and events opened until none were left could make the harness's
        other threads fail to open files meanwhile."""
        pids = self.pids()
        self.period_ns, threads, cpus = period_ns, _threads(pids), os.cpu_count() or 1
        try:
            self._cores = len(os.sched_getaffinity(pids[0])) if pids else 1
        except OSError:
            self._cores = cpus
        if not room_for(len(threads) * cpus):
            self.refusal = (f"too many open files: {len(threads)} threads on {cpus} CPUs need {len(threads) * cpus} "
                            f"events (one per thread per CPU), and the harness may open "
                            f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]} files (ulimit -Hn)")
            return
        failed = self._open_events(_attr(period_ns), threads)
        if failed is not None:
            self.refusal = f"{failed.filename or 'mmap'}: {os.strerror(failed.errno) if failed.errno else failed}"

    def _open_events(self, attr: ctypes.Array, threads: list[int]) -> OSError | None:
        """Every thread's events opened, or why not (and none left open: sampling some threads only
        would say too little)."""
        try:
            for cpu in range(os.cpu_count() or 1):
                leader = None
                for tid in threads:
                    fd = _libc.syscall(_NR_PERF_EVENT_OPEN, attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
                    if fd < 0:
                        if ctypes.get_errno() == errno.ESRCH:  # the thread ended meanwhile
                            continue
                        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), "perf_event_open")
                    self._events.append(fd)
                    if leader is None:
                        leader = fd
                        self._rings.append(mmap.mmap(fd, (1 + RING_PAGES) * PAGE_BYTES))
                    elif _libc.ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, leader) != 0:
                        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), "PERF_EVENT_IOC_SET_OUTPUT")
        except OSError as exc:
            self._close()
            return exc
        return None

    @property
    def active(self) -> bool:
        """Whether the threads could be sampled."""
        return bool(self._rings)

    def tells(self, ms_per_call: float) -> bool:
        """Whether the calls sampled so far tell library CPU time of `ms_per_call` a call (`tells`)."""
        return tells(ms_per_call, self.calls, self.period_ns / 1e6)

    @property
    def working(self) -> int:
        """Samples kept so far, in the blocks watched, outside the thread pools' runtimes: where a
        busy host keeps one of a parallel loop's threads off its core, the others' samples are of
        waiting for it, and say nothing of the work (a reference's library samples had come out
        too few for the hidden-library check, its samples enough in all)."""
        return self._ips.total() - self._waiting

    def _in_runtime(self, ips: list[int]) -> int:
        """How many of `ips` lie in a thread pool runtime's code."""
        counted = Counter(ips)
        if any(_region_of(self._code, ip) is None for ip in counted):
            self._code = _code_maps(self.pids())  # code mapped since it was read last, or never read
        return sum(count for ip, count in counted.items()
                   if (region := _region_of(self._code, ip)) is not None and THREAD_RUNTIME.search(region[2]))

    @contextlib.contextmanager
    def watching(self, calls: int = 0) -> Iterator[None]:
        """Samples what runs inside the block, `calls` forward calls. Where the kernel throttled
        the events meanwhile (it lowered its sample rate), their samples stand for more than a
        period each, by how much no count tells (an event's own count of its thread's CPU time
        came out 30 times too large once throttled): all gathered so far is dropped and sampling
        starts over at a period the new rate allows (`_start_over`)."""
        for fd in self._events:
            _libc.ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)  # and the events the kernel made for new threads
        began = time.perf_counter()
        try:
            yield
        finally:
            watched_s = time.perf_counter() - began
            for fd in self._events:
                _libc.ioctl(fd, PERF_EVENT_IOC_DISABLE, 0)
            drained = [_drained(ring) for ring in self._rings]
            if any(throttled for _, _, throttled in drained):
                self._throttled += sum(throttled for _, _, throttled in drained)
                self._start_over()
            elif drained:
                for ips, lost, _ in drained:
                    self._ips.update(ips)
                    self._waiting += self._in_runtime(ips)
                    self._lost += lost
                self.calls += calls
                self.blocks += 1
                self.watched_s += watched_s

    def _start_over(self) -> None:
        """Samples at the old period dropped, the events opened again at the period the host's rate
        now allows, at least twice the old one (the rate falls in steps); none past LONGEST_PERIOD_NS
        (or `least_ns`, if longer), whose samples would be too few to tell."""
        self._close()
        self._ips.clear()
        self._lost = self._waiting = self.calls = self.blocks = 0
        self.watched_s = 0.0
        period_ns, longest_ns = max(2 * self.period_ns, period_for(max_sample_rate(), self.least_ns)), max(LONGEST_PERIOD_NS, self.least_ns)
        if period_ns > longest_ns:
            self.refusal = f"the kernel throttled sampling {self._throttled} times, down to a period over {longest_ns / 1e6:g} ms"
            return
        self._open(period_ns)

    def so_far(self) -> CpuSamples:
        """What the blocks watched so far saw (the processes' code read again where a sample lies
        outside what was read)."""
        if any(_region_of(self._code, ip) is None for ip in self._ips):
            self._code = _code_maps(self.pids())
        return self._gathered(self._code)

    def _gathered(self, code: list[Region]) -> CpuSamples:
        library = sum(count for ip, count in self._ips.items() if _is_library_code(code, ip))
        return CpuSamples(period_ms=self.period_ns / 1e6, samples=self._ips.total(), library=library,
                          lost=self._lost, throttled=self._throttled, calls=self.calls, cores=self._cores)

    def __exit__(self, *exc) -> None:
        if not self._rings:
            return
        code = _code_maps(self.pids())
        self._close()
        self.samples = self._gathered(code)

    def _close(self) -> None:
        for ring in self._rings:
            ring.close()
        for fd in self._events:
            os.close(fd)
        self._events, self._rings = [], []


def room_for(files: int) -> bool:
    """Whether this process may open `files` more files and keep RESERVED_FILES free, once its soft
    limit is raised to the hard one where it must be."""
    def room() -> int:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0] - len(os.listdir("/proc/self/fd")) - RESERVED_FILES
    return room() >= files or (more_open_files() and room() >= files)


def more_open_files() -> bool:
    """Raise this process's soft limit on open files to its hard limit; whether it rose."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == hard:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # an unlimited hard limit, past what the kernel allows (fs.nr_open)
        return False
    return True


def refused() -> str | None:
    """Why this host will not let the harness sample a child's threads (perf_event_paranoid above
    2, a container's seccomp profile, locked-memory limits) or not often enough, or None: tried
    once, on a child of our own that only waits on its stdin."""
    with subprocess.Popen([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as child:
        try:
            with Sampler(lambda: [child.pid]) as sampler:
                if not sampler.active:
                    return sampler.refusal or "refused"
        finally:
            child.kill()
    return too_rare(max_sample_rate())


def too_rare(max_sample_rate: int | None) -> str | None:
    """Why samples at the host's sample rate are too few to tell, or None."""
    if period_for(max_sample_rate) <= LONGEST_PERIOD_NS:
        return None
    return (f"kernel.perf_event_max_sample_rate is {max_sample_rate}, which the kernel lowers where its interrupts run "
            "long: too few samples; raise it (sysctl -w kernel.perf_event_max_sample_rate=100000)")


def _drained(ring: mmap.mmap) -> tuple[list[int], int, int]:
    """The program counters of the samples a ring holds, how many samples it lost, and how often
    its events were throttled; the ring is left empty (its tail moved up to its head)."""
    head, tail = struct.unpack_from("QQ", ring, DATA_HEAD_OFFSET)
    size = RING_PAGES * PAGE_BYTES
    start, length = tail % size, min(head - tail, size)
    end = start + length
    data = ring[PAGE_BYTES + start:PAGE_BYTES + min(end, size)] + ring[PAGE_BYTES:PAGE_BYTES + max(0, end - size)]
    position, ips, lost, throttled = 0, [], 0, 0
    while position + 8 <= len(data):
        kind, _, record = struct.unpack_from("IHH", data, position)
        if record < 8 or position + record > len(data):
            break
        if kind == PERF_RECORD_SAMPLE and record >= 16:
            ips.append(struct.unpack_from("Q", data, position + 8)[0])
        elif kind == PERF_RECORD_LOST and record >= 24:
            lost += struct.unpack_from("Q", data, position + 16)[0]
        throttled += kind == PERF_RECORD_THROTTLE
        position += record
    struct.pack_into("Q", ring, DATA_HEAD_OFFSET + 8, head)
    return ips, lost, throttled


Region = tuple[int, int, str, int]  # an executable mapping: start, end, file, the file's load address


def _code_maps(pids: Iterable[int]) -> list[Region]:
    """Executable mappings of `pids`, sorted, each with where its file was loaded (its lowest
    mapping: symbols' addresses are relative to it)."""
    regions, loaded = [], {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                lines = [line.split(maxsplit=5) for line in maps]
        except OSError:
            continue
        for fields in lines:
            start, end = (int(part, 16) for part in fields[0].split("-"))
            path = fields[5].strip() if len(fields) == 6 else ""
            loaded[(pid, path)] = min(loaded.get((pid, path), start), start)
            if "x" in fields[1]:
                regions.append((start, end, path, pid))
    return sorted((start, end, path, loaded[(pid, path)]) for start, end, path, pid in regions)


def _region_of(code: list[Region], ip: int) -> Region | None:
    index = bisect.bisect_right(code, (ip, math.inf)) - 1
    return code[index] if index >= 0 and code[index][0] <= ip < code[index][1] else None


def _is_library_code(code: list[Region], ip: int) -> bool:
    region = _region_of(code, ip)
    if region is None or not is_library(region[2]):
        return False
    _, _, path, loaded = region
    helpers = _math_helpers(path)
    at = bisect.bisect_right(helpers, (ip - loaded, math.inf)) - 1
    return not (at >= 0 and helpers[at][0] <= ip - loaded < helpers[at][1])


# Vector math any kernel may call, shipped inside libtorch_cpu: an honest C++ kernel's
# at::vec exp() runs there.
HELPER_PREFIX = b"Sleef_"
SHT_DYNSYM = 11


@functools.lru_cache(maxsize=16)
def _math_helpers(path: str) -> list[tuple[int, int]]:
    """Address ranges of the vector math functions a library exports (its dynamic symbols named
    HELPER_PREFIX...), sorted; none where the file cannot be read as a 64-bit ELF."""
    try:
        with open(path, "rb") as elf:
            header = elf.read(64)
            if header[:5] != b"\x7fELF\x02":
                return []
            section_offset, = struct.unpack_from("Q", header, 0x28)
            entry_bytes, count = struct.unpack_from("HH", header, 0x3A)
            elf.seek(section_offset)
            sections = [struct.unpack_from("IIQQQQII", elf.read(entry_bytes)) for _ in range(count)]
            dynsym = next((s for s in sections if s[1] == SHT_DYNSYM), None)
            if dynsym is None:
                return []
            names = sections[dynsym[6]]
            elf.seek(names[4])
            strings = elf.read(names[5])
            elf.seek(dynsym[4])
            table = elf.read(dynsym[5])
    except (OSError, struct.error, IndexError):
        return []
    ranges = []
    for name, _, _, _, value, size in struct.iter_unpack("<IBBHQQ", table[:len(table) - len(table) % 24]):
        if size and strings.startswith(HELPER_PREFIX, name):
            ranges.append((value, value + size))
    return sorted(ranges)
