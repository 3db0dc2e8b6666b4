"""Sampling a worker's threads from outside: each sample's program counter mapped to the file its
code lies in, library compute told apart from the interpreter and from a candidate's own code."""

import os
import resource
import struct
import subprocess
import sys
import textwrap

import pytest

from harness.cpu import sampling
from harness.cpu.sampling import PAGE_BYTES, RING_PAGES, CpuSamples, Sampler, is_library

TORCH_LIB = "/venv/lib/python3.11/site-packages/torch/lib"


@pytest.mark.parametrize("path, library", [
    (f"{TORCH_LIB}/libtorch_cpu.so", True),
    (f"{TORCH_LIB}/libc10.so", True),
    (f"{TORCH_LIB}/libtorch_python.so", False),  # the bindings: any candidate's calls go through them
    (f"{TORCH_LIB}/libgomp.so.1", False),  # the thread pool's runtime: an honest parallel loop waits there
    ("/venv/lib/python3.11/site-packages/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", True),
    ("/venv/lib/python3.11/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so", True),
    ("/opt/intel/lib/libmkl_core.so.2", True),
    ("/usr/lib/x86_64-linux-gnu/libopenblas.so.0", True),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", False),
    ("/usr/bin/python3.11", False),
    ("/tmp/build/softmax_rows_ext/softmax_rows_ext.so", False),  # a candidate's own extension
    ("", False),  # anonymous memory
])
def test_library_code_is_pytorchs_and_numeric_libraries_not_the_interpreter_or_own_code(path, library):
    assert is_library(path) is library


def record(kind: int, body: bytes) -> bytes:
    return struct.pack("IHH", kind, 0, 8 + len(body)) + body


def test_a_ring_is_read_across_its_wrap_with_lost_samples_and_throttling_counted_and_left_empty():
    size = RING_PAGES * PAGE_BYTES
    ring = bytearray(PAGE_BYTES + size)
    samples = [record(sampling.PERF_RECORD_SAMPLE, struct.pack("Q", ip)) for ip in (0x1000, 0x2000, 0x3000)]
    throttle = record(sampling.PERF_RECORD_THROTTLE, struct.pack("QQQ", 1, 2, 3))
    lost = record(sampling.PERF_RECORD_LOST, struct.pack("QQ", 1, 5))
    data = b"".join(samples[:2]) + throttle + lost + samples[2]
    tail = size - 30  # the second sample straddles the end of the ring
    for offset, byte in enumerate(data):
        ring[PAGE_BYTES + (tail + offset) % size] = byte
    struct.pack_into("QQ", ring, sampling.DATA_HEAD_OFFSET, tail + len(data), tail)
    assert sampling._drained(ring) == ([0x1000, 0x2000, 0x3000], 5, 1)
    head, new_tail = struct.unpack_from("QQ", ring, sampling.DATA_HEAD_OFFSET)
    assert new_tail == head  # read: the kernel may write there again


def sampled_child(code: str, period_ns: int | None = None) -> CpuSamples | None:
    """Samples of a child process while it runs `code` (after importing torch, outside the window)."""
    return sampler_of_child([code], period_ns).samples


def sampler_of_child(blocks: list[str], period_ns: int | None = None) -> Sampler:
    """A sampler, done, that watched a child process run each of `blocks` in a block of its own,
    the nth (from 1) counted as n calls (after importing torch, outside the windows). PyTorch runs
    on one thread there: on a busy host a second one spends most of its samples waiting in the
    thread pool's runtime for the first (test_samples_in_a_thread_pools_runtime_are_not_counted_as_work),
    which says nothing of what is library code."""
    script = textwrap.dedent("""
        import sys, threading, torch
        torch.set_num_threads(1)
        x = torch.randn(512, 512)
        print("ready", flush=True)
        for block in sys.argv[1:]:
            sys.stdin.readline()
            exec(block)
            print("done", flush=True)
        sys.stdin.readline()
    """)
    with subprocess.Popen([sys.executable, "-c", script, *map(textwrap.dedent, blocks)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout.readline() == "ready\n"
        with Sampler(lambda: [child.pid], period_ns) as sampler:
            if not sampler.active:
                child.kill()
                pytest.skip("this host does not let the harness sample a child process (perf_event_paranoid, seccomp)")
            for calls in range(1, len(blocks) + 1):
                with sampler.watching(calls):
                    child.stdin.write("go\n")
                    child.stdin.flush()
                    assert child.stdout.readline() == "done\n"
        child.stdin.write("exit\n")
        child.stdin.flush()
    return sampler


# The host's sampling period (longer where its sample rate is low), and CPU seconds of work that
# give 200 samples at it or more.
HOST_PERIOD_NS = sampling.period_for(sampling.max_sample_rate())
BUSY_S = max(0.3, 200 * HOST_PERIOD_NS / 1e9)


def busy(work: str) -> str:
    """Code that does `work` over and over for BUSY_S of the process's CPU time (`work` long
    enough that the clock's system calls take little of it)."""
    return f"import time\nend = time.process_time() + {BUSY_S}\nwhile time.process_time() < end: {work}"


def test_pytorchs_compute_is_library_time_and_the_interpreters_is_not():
    matmuls = sampled_child(busy("x @ x"))
    assert matmuls.samples > 100 and matmuls.library > 0.8 * matmuls.samples
    python = sampled_child(busy("total = sum(range(10_000))"))
    assert python.samples > 100 and python.library < 0.02 * python.samples


def test_a_thread_started_while_sampled_is_sampled_too():
    """The kernel follows threads the sampled ones start: a candidate cannot hide its library
    work in a thread of its own."""
    found = sampled_child(f"""
        def work():
            torch.set_num_threads(1)  # OpenMP's thread count is each thread's own
            exec({busy("x @ x")!r}, globals())
        thread = threading.Thread(target=work)
        thread.start(); thread.join()
    """)
    assert found.samples > 100 and found.library > 0.8 * found.samples


def test_at_the_hosts_period_a_sample_stands_for_a_period_of_cpu_time():
    """The period follows the host's sample rate, so the kernel throttles no event: the samples
    times the period are the CPU time spent (a busy loop of BUSY_S, within 15%)."""
    found = sampled_child(busy("total = sum(range(10_000))"))
    assert found.throttled == 0
    assert found.samples * found.period_ms == pytest.approx(BUSY_S * 1000, rel=0.15)


def test_samples_in_a_thread_pools_runtime_are_not_counted_as_work(monkeypatch):
    """A thread spinning in OpenMP's runtime waits for another (one a busy host keeps off its core),
    and says nothing of the work: what the timer counts to know it sampled enough leaves it out."""
    import torch  # noqa: F401 (it loads its OpenMP runtime into this process)
    code = sampling._code_maps([os.getpid()])
    runtime = next(start for start, _, path, _ in code if sampling.THREAD_RUNTIME.search(path))
    torch_code = next(start for start, _, path, _ in code if path.endswith("libtorch_cpu.so"))
    rings = iter([([runtime] * 3 + [torch_code] * 2, 0, 0)])
    monkeypatch.setattr(sampling, "_drained", lambda ring: next(rings, ([], 0, 0)))
    with Sampler(lambda: [os.getpid()]) as sampler:
        if not sampler.active:
            pytest.skip("this host does not let the harness sample a process (perf_event_paranoid, seccomp)")
        with sampler.watching(1):
            pass
        assert sampler.working == 2


def test_the_period_is_as_long_as_the_hosts_sample_rate_needs_for_no_event_to_be_throttled():
    assert sampling.period_for(100_000) == sampling.PERIOD_NS  # the kernel's default rate
    assert sampling.period_for(5_000) == 400_000  # lowered by the kernel: 2,500 samples a second at most
    assert sampling.period_for(None) == sampling.PERIOD_NS  # not readable: the default
    assert sampling.period_for(5_000, least_ns=sampling.SPARSE_PERIOD_NS) == sampling.SPARSE_PERIOD_NS  # long enough
    # Rarer than a sample every LONGEST_PERIOD_NS: the run says sampling is missing, and how to fix it.
    assert sampling.too_rare(100_000) is None and sampling.too_rare(1_000) is None and sampling.too_rare(None) is None
    assert "perf_event_max_sample_rate is 500" in sampling.too_rare(500)


def throttled_first(monkeypatch, lowered_rate: int) -> None:
    """The kernel, as seen by the sampler: it lowers its sample rate to `lowered_rate` and throttles
    the events of the first block watched (one ring's)."""
    drained, throttles = sampling._drained, iter([1])
    monkeypatch.setattr(sampling, "_drained", lambda ring: (*drained(ring)[:2], next(throttles, 0)))
    monkeypatch.setattr(sampling, "max_sample_rate", lambda: lowered_rate)


def test_where_the_kernel_throttles_sampling_it_starts_over_at_the_period_its_lowered_rate_allows(monkeypatch):
    """A throttled event's samples stand for more than a period each, by how much no count tells:
    what was gathered is dropped and sampling goes on at a longer period, the samples kept a period
    each."""
    throttled_first(monkeypatch, lowered_rate=5_000)
    sampler = sampler_of_child([busy("total = sum(range(10_000))")] * 2, period_ns=HOST_PERIOD_NS)
    found = sampler.samples
    assert found.period_ms * 1e6 == max(2 * HOST_PERIOD_NS, sampling.period_for(5_000))
    assert found.throttled == 1 and found.calls == 2 and sampler.blocks == 1  # the second block only
    assert found.samples * found.period_ms == pytest.approx(BUSY_S * 1000, rel=0.15)


def test_sampling_throttled_down_to_too_long_a_period_says_nothing(monkeypatch):
    throttled_first(monkeypatch, lowered_rate=500)  # 4 ms: too few samples to tell
    sampler = sampler_of_child([busy("total = sum(range(10_000))")] * 2, period_ns=HOST_PERIOD_NS)
    assert sampler.samples is None and not sampler.active and "throttled sampling 1 times" in sampler.refusal


def test_library_time_per_call_is_a_period_a_sample_with_what_a_full_ring_lost():
    assert CpuSamples(period_ms=0.05, samples=100, library=50, calls=10).library_ms_per_call == pytest.approx(0.25)
    found = CpuSamples(period_ms=0.05, samples=100, library=50, lost=100, calls=10)
    assert found.library_ms_per_call == pytest.approx(50 * 2 * 0.05 / 10)
    assert CpuSamples(period_ms=0.05).library_ms_per_call == 0.0


@pytest.fixture
def open_files():
    """This process's limits on open files, restored afterwards (the sampler may raise the soft one)."""
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def threaded_child(threads: int) -> subprocess.Popen:
    """A child process with `threads` idle threads besides its main one, once it has said so."""
    script = f"import sys, threading\nfor _ in range({threads}): threading.Thread(target=sys.stdin.read, daemon=True).start()\n" \
             "print('ready', flush=True)\nsys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    return child


def fewer_open_files(events: int) -> int:
    """Lower this process's soft limit on open files to leave room for fewer than `events` more; the limit."""
    soft = len(os.listdir("/proc/self/fd")) + events // 2
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    return soft


def test_threads_too_many_for_the_soft_limit_on_open_files_are_sampled_under_the_hard_one(open_files):
    """An event per thread and CPU: a candidate's 600 idle threads had put it out of sight behind
    the usual soft limit of 1,024 (2026-12-05)."""
    child = threaded_child(100)
    events = 101 * (os.cpu_count() or 1)
    if open_files[1] != resource.RLIM_INFINITY and \
            open_files[1] < len(os.listdir("/proc/self/fd")) + 2 * events + sampling.RESERVED_FILES:
        pytest.skip(f"the hard limit on open files ({open_files[1]}) leaves no room for {events} events")
    try:
        fewer_open_files(events)
        with Sampler(lambda: [child.pid]) as sampler:
            if sampler.refusal is not None:
                pytest.skip(f"this host does not let the harness sample a child process: {sampler.refusal}")
            assert sampler.active
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    finally:
        child.kill()
        child.wait()


def test_threads_too_many_for_the_hard_limit_are_refused_before_any_event_takes_a_file(open_files, monkeypatch):
    """Refused with their count and the limit, and without opening events until none are left:
    the harness's other threads open files meanwhile (RESERVED_FILES stay free for them)."""
    monkeypatch.setattr(sampling, "more_open_files", lambda: False)  # the hard limit reached
    monkeypatch.setattr(Sampler, "_open_events", lambda *args: pytest.fail("events opened past the limit"))
    child = threaded_child(100)
    try:
        soft = fewer_open_files(101 * (os.cpu_count() or 1))
        with Sampler(lambda: [child.pid]) as sampler:
            assert not sampler.active and sampler.samples is None
        assert sampler.refusal == f"too many open files: 101 threads on {os.cpu_count()} CPUs need " \
                                  f"{101 * os.cpu_count()} events (one per thread per CPU), and the harness may open {soft} files (ulimit -Hn)"
    finally:
        child.kill()
        child.wait()


def test_room_for_files_keeps_some_free_for_the_harness(open_files, monkeypatch):
    monkeypatch.setattr(sampling, "more_open_files", lambda: False)
    free = open_files[0] - len(os.listdir("/proc/self/fd"))
    assert sampling.room_for(free - sampling.RESERVED_FILES - 1)
    assert not sampling.room_for(free - sampling.RESERVED_FILES + 1)


def test_the_soft_limit_on_open_files_rises_to_the_hard_one_once(open_files):
    soft, hard = open_files
    if soft == hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))
    assert sampling.more_open_files() is True
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    assert sampling.more_open_files() is False
