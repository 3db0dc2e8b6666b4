"""Sampling a worker's threads from outside: each sample's program counter mapped to the file its
code lies in, library compute told apart from the interpreter and from a candidate's own code."""

import mmap
import struct
import subprocess
import sys
import textwrap

import pytest

from harness.worker import sampling
from harness.worker.sampling import PAGE_BYTES, RING_PAGES, CpuSamples, Sampler, is_library

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


def test_a_ring_is_read_across_its_wrap_and_left_empty():
    size = RING_PAGES * PAGE_BYTES
    ring = bytearray(PAGE_BYTES + size)
    samples = [record(sampling.PERF_RECORD_SAMPLE, struct.pack("Q", ip)) for ip in (0x1000, 0x2000, 0x3000)]
    lost = record(2, struct.pack("QQ", 1, 5))  # PERF_RECORD_LOST: not a sample
    data = b"".join(samples[:2]) + lost + samples[2]
    tail = size - 30  # the second sample straddles the end of the ring
    for offset, byte in enumerate(data):
        ring[PAGE_BYTES + (tail + offset) % size] = byte
    struct.pack_into("QQ", ring, sampling.DATA_HEAD_OFFSET, tail + len(data), tail)
    assert sampling._drained(ring) == [0x1000, 0x2000, 0x3000]
    head, new_tail = struct.unpack_from("QQ", ring, sampling.DATA_HEAD_OFFSET)
    assert new_tail == head  # read: the kernel may write there again


def sampled_child(code: str, period_ns: int | None = None) -> CpuSamples | None:
    """Samples of a child process while it runs `code` (after importing torch, outside the window)."""
    script = textwrap.dedent("""
        import sys, threading, torch
        x = torch.randn(512, 512)
        print("ready", flush=True)
        sys.stdin.readline()
    """) + textwrap.dedent(code) + "\nprint('done', flush=True)\nsys.stdin.readline()\n"
    with subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:
        assert child.stdout.readline() == "ready\n"
        with Sampler(lambda: [child.pid], period_ns) as sampler:
            if not sampler.active:
                child.kill()
                pytest.skip("this host does not let the harness sample a child process (perf_event_paranoid, seccomp)")
            with sampler.watching():
                child.stdin.write("go\n")
                child.stdin.flush()
                assert child.stdout.readline() == "done\n"
        child.stdin.write("exit\n")
        child.stdin.flush()
    return sampler.samples


def test_pytorchs_compute_is_library_time_and_the_interpreters_is_not():
    matmuls = sampled_child("for _ in range(200): x @ x")
    assert matmuls.samples > 100 and matmuls.library > 0.8 * matmuls.samples
    python = sampled_child("total = 0\nfor i in range(2_000_000): total += i")
    assert python.samples > 100 and python.library < 0.02 * python.samples


def test_a_thread_started_while_sampled_is_sampled_too():
    """The kernel follows threads the sampled ones start: a candidate cannot hide its library
    work in a thread of its own."""
    found = sampled_child("""
        thread = threading.Thread(target=lambda: [x @ x for _ in range(200)])
        thread.start(); thread.join()
    """)
    assert found.samples > 100 and found.library > 0.8 * found.samples


def test_the_cpu_time_is_the_kernels_count_whatever_share_of_it_was_sampled():
    """A throttled event or a longer period takes fewer samples of the same CPU time: the library's
    share of the samples is taken of the time the kernel counted."""
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: x @ x"
    for period_ns in (sampling.PERIOD_NS, 2_000_000):
        found = sampled_child(busy, period_ns)
        assert 290 < found.cpu_ms < 450, period_ns  # all threads: the process's own count, and its last matmul
        assert found.samples == pytest.approx(found.cpu_ms / found.period_ms, rel=0.3), period_ns
        assert found.library > 0.8 * found.samples, period_ns


def test_the_period_is_as_long_as_the_hosts_sample_rate_needs_for_no_event_to_be_throttled():
    assert sampling.period_for(100_000) == sampling.PERIOD_NS  # the kernel's default rate
    assert sampling.period_for(5_000) == 400_000  # lowered by the kernel: 2,500 samples a second at most
    assert sampling.period_for(None) == sampling.PERIOD_NS  # not readable: the default
    # Rarer than a sample every LONGEST_PERIOD_NS: the run says sampling is missing, and how to fix it.
    assert sampling.too_rare(100_000) is None and sampling.too_rare(1_000) is None and sampling.too_rare(None) is None
    assert "perf_event_max_sample_rate is 500" in sampling.too_rare(500)


def test_library_time_per_call_is_its_share_of_the_samples_of_the_cpu_time_counted():
    found = CpuSamples(period_ms=0.05, cpu_ms=20.0, samples=100, library=50, calls=10)
    assert found.library_ms_per_call == pytest.approx(20.0 * 0.5 / 10)
    assert CpuSamples(period_ms=0.05).library_ms_per_call == 0.0
