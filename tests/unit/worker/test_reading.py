"""The parent's side of the commit buffer: a worker's CPU tensors read back exactly, into read
buffers that the next read reuses, never more than the worker actually wrote, out of a file
the worker cannot shrink under the parent's mapping, and with the worker stopped while it is read."""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from harness.errors import UsageError
from harness.run import resolve_device
from harness.worker import processes
from harness.worker.parent import CommitFile, ReadBuffers, StopReason, Worker, WorkerStopped, sealed_memory_file
from harness.worker.protocol import CommitBuffer, TensorRef, describe

IDLE = "import time; time.sleep(600)"
# A worker whose thread rewrites its whole commit buffer (all 1s, then all 2s, over and over) as a
# candidate's could after its reply; its main thread only waits, so it is the first to stop.
REWRITER = textwrap.dedent("""
    import array, os, sys, threading
    fd, count = int(sys.argv[1]), int(sys.argv[2])
    ones, twos = array.array("f", [1.0]) * count, array.array("f", [2.0]) * count
    def rewrite():
        while True:
            os.pwrite(fd, ones, 0)
            os.pwrite(fd, twos, 0)
    threading.Thread(target=rewrite, daemon=True).start()
    os.write(1, b"writing")
    threading.Event().wait()
""")


def worker_reading(code: str, *args: str) -> Worker:
    """A Worker's reading side over a commit buffer, its process running `code` (given the buffer)."""
    worker = Worker.__new__(Worker)  # only the process, the buffer and the read buffers are used
    worker.buffer, worker.gpu, worker._read_buffers, worker._held_stopped = CommitFile(), None, ReadBuffers(), False
    worker.timeout_s, worker._reaping = 60.0, threading.Lock()
    worker._worker_pid, worker._worker_pidfd, worker._known_pids, worker.key_dir = None, -1, [], None
    worker.process = subprocess.Popen([sys.executable, "-c", code, str(worker.buffer.fd), *args],
                                      pass_fds=[worker.buffer.fd], stdout=subprocess.PIPE)
    return worker


def discard(worker: Worker) -> None:
    worker.process.kill()
    worker.process.wait()
    worker.buffer.close()


@pytest.fixture
def parent():
    """A reading side over a commit buffer this test writes as the worker would."""
    worker = worker_reading(IDLE)
    yield worker
    discard(worker)


def test_tensors_of_any_dtype_and_layout_read_back_exactly(parent):
    sent = [torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.tensor([True, False, True]),
            torch.randn(4, 6).t(), torch.randn(1, dtype=torch.float64)]
    refs = describe(sent, CommitBuffer(parent.buffer.fd))
    with parent.reading(refs, "test") as read:
        assert len(read) == len(sent)
        for want, got in zip(sent, read):
            assert got.dtype == want.dtype and torch.equal(got, want)


def test_the_next_read_reuses_the_buffer(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1000)], commit), "test") as first:
        address = first[0].data_ptr()
    with parent.reading(describe([torch.full((1000,), 2.0)], commit), "test") as second:
        assert second[0].data_ptr() == address and bool((second[0] == 2).all())


def test_reads_open_at_once_get_their_own_buffers(parent):
    commit = CommitBuffer(parent.buffer.fd)
    outputs = describe([torch.ones(64)], commit)
    with parent.reading(outputs, "test") as a, parent.reading(outputs, "test") as b:
        assert a[0].data_ptr() != b[0].data_ptr()
        a[0].zero_()
        assert bool((b[0] == 1).all())


def test_a_reply_cannot_claim_more_than_was_written(parent):
    (ref,) = describe([torch.ones(10)], CommitBuffer(parent.buffer.fd))
    huge = ref.model_copy(update={"shape": [1 << 40], "stride": [1]})
    with pytest.raises(ValueError, match="runs past"):
        parent._host_bytes([huge])
    assert parent._host_bytes([ref]) == 64  # 40 bytes, aligned so that the next tensor can view any dtype


def test_the_same_bytes_described_many_times_over_are_refused_before_anything_is_allocated(parent):
    """Each description fits the buffer; together they would have the parent copy it a thousand
    times (a 29 KB reply took the parent to 4.2 GB before this check)."""
    (ref,) = describe([torch.ones(1000)], CommitBuffer(parent.buffer.fd))
    with pytest.raises(ValueError, match="add up to"):
        parent._host_bytes([ref] * 1000)
    assert parent._host_bytes([ref]) == 4032


def test_what_was_read_is_a_copy_the_worker_cannot_change_afterwards(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1000)], commit), "test") as read:
        describe([torch.zeros(1000)], commit)  # the worker writes again while the parent looks
        assert bool((read[0] == 1).all())


def test_a_buffer_grown_between_reads_is_read_whole(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(10)], commit), "test") as small:
        assert small[0].sum() == 10
    big = torch.arange(1 << 20, dtype=torch.float32)
    with parent.reading(describe([big], commit), "test") as read:
        assert torch.equal(read[0], big)


def test_the_worker_cannot_shrink_its_buffer_under_the_parents_mapping(parent):
    commit = CommitBuffer(parent.buffer.fd)
    with parent.reading(describe([torch.ones(1 << 16)], commit), "test"):
        pass
    with pytest.raises(PermissionError):  # a mapping past the end would kill the parent (SIGBUS)
        os.ftruncate(parent.buffer.fd, 0)
    with parent.reading(describe([torch.ones(4)], commit), "test") as read:
        assert read[0].sum() == 4


def test_only_the_largest_free_buffers_are_kept():
    buffers = ReadBuffers()
    for size in (10, 30, 20):
        buffers.give_back(bytearray(size))
    assert len(buffers.take(25)) == 30 and len(buffers.take(5)) == 20
    assert len(buffers.take(5)) == 5  # none left: a new one


def test_a_worker_that_writes_on_after_its_reply_is_read_whole_and_goes_on():
    count = 1 << 22  # 16 MB: the copy takes long enough for a running writer to tear it
    worker = worker_reading(REWRITER, str(count))
    try:
        (ref,) = describe([torch.ones(count)], CommitBuffer(worker.buffer.fd))
        assert worker.process.stdout.read(7) == b"writing"
        for _ in range(20):
            with worker.reading([ref], "test") as read:
                assert read[0].unique().tolist() in ([1.0], [2.0]), "a read saw the worker's writes half done"
                assert not processes.stopped(worker.pid)  # it goes on once its outputs are copied
    finally:
        discard(worker)


# A launcher and its worker, which holds thousands of idle native threads (a candidate's could)
# and one that counts in the commit buffer's first word, as fast as it can.
COUNTER_BESIDE_IDLE_THREADS = textwrap.dedent("""
    import ctypes, mmap, os, sys, threading
    if os.fork():
        os.wait()
        sys.exit()
    libc = ctypes.CDLL(None)
    attr = ctypes.create_string_buffer(64)
    libc.pthread_attr_init(attr)
    libc.pthread_attr_setstacksize(attr, ctypes.c_size_t(1 << 16))
    for _ in range(int(sys.argv[2])):
        if libc.pthread_create(ctypes.byref(ctypes.c_ulong()), attr, ctypes.cast(libc.pause, ctypes.c_void_p), None):
            break
    os.ftruncate(int(sys.argv[1]), 8)
    word = mmap.mmap(int(sys.argv[1]), 8)
    def count():
        n = 0
        while True:
            n += 1
            word[:8] = n.to_bytes(8, "little")
    threading.Thread(target=count, daemon=True).start()
    os.write(1, b"counting")
    threading.Event().wait()
""")


def test_a_worker_of_thousands_of_threads_stops_before_its_tree_is_looked_up():
    """Looking up a worker's tree reads a file per thread (about 0.1 s for 3,000 on the 2-core VM):
    the worker process is stopped first, so its other threads cannot work on meanwhile, and the CPU
    time they spent before they stopped is told."""
    worker = worker_reading(COUNTER_BESIDE_IDLE_THREADS, "3000")

    def counted() -> int:
        return int.from_bytes(os.pread(worker.buffer.fd, 8, 0), "little")

    try:
        assert worker.process.stdout.read(8) == b"counting"
        began, first = time.perf_counter(), counted()
        time.sleep(0.2)
        per_ms = (counted() - first) / ((time.perf_counter() - began) * 1000)
        for _ in range(2):  # the second stop accounts for what the first found
            before = counted()
            with worker.stopped_all("test") as unobserved_ms:
                at_stop = counted()
                time.sleep(0.05)
                assert counted() == at_stop
        # Its tree looked up first, it counted on for 31 ms; stopped first, for none.
        assert (at_stop - before) < 5 * per_ms, "the worker counted on while its tree was looked up"
        assert unobserved_ms > 0  # 9 to 16 ms: each idle thread ran to stop
    finally:
        processes.kill_tree(worker.pid)
        discard(worker)


def test_a_timed_call_inputs_are_written_while_the_worker_is_stopped(monkeypatch):
    """Fed inputs (CPU runs): none of the worker's threads runs while they are written, so it can
    compute nothing from them before the command that starts the parent's clock."""
    worker = worker_reading(IDLE)
    worker._feed = CommitBuffer(sealed_memory_file("feed"))
    stopped_while_written, write = [], CommitBuffer.write

    def watched(buffer, tensors):
        stopped_while_written.append(processes.stopped(worker.pid))
        return write(buffer, tensors)

    monkeypatch.setattr(CommitBuffer, "write", watched)
    try:
        values = torch.arange(10.0)
        (ref,) = worker.feed([values], "test")
        assert stopped_while_written == [True] and not processes.stopped(worker.pid)
        written = torch.frombuffer(bytearray(os.pread(worker._feed.fd, values.nbytes, ref.offset)), dtype=torch.float32)
        assert torch.equal(written, values)
        with pytest.raises(PermissionError):  # the parent maps it to write: a shrunk file would fault it
            os.ftruncate(worker._feed.fd, 0)
    finally:
        worker._feed.close()
        discard(worker)


def test_reads_nested_in_one_stop_let_the_worker_go_on_only_after_the_last(parent):
    """A checked call's fed inputs and outputs are read one after the other: the worker must not
    run in between, where it could learn from the first which calls are checked."""
    sent = [torch.randn(3, 5)]
    refs = describe(sent, CommitBuffer(parent.buffer.fd))
    with parent.stopped_all("test"):
        for _ in range(2):
            with parent.reading(refs, "test") as read:
                assert torch.equal(read[0], sent[0])
            assert processes.stopped(parent.pid)  # still, between the two reads
    assert not processes.stopped(parent.pid)


def test_tensors_passed_straight_on_are_read_in_place_with_the_worker_stopped_throughout(parent):
    sent = [torch.randn(3, 5), torch.arange(7, dtype=torch.int64)]
    refs = describe(sent, CommitBuffer(parent.buffer.fd))
    with parent.reading(refs, "test", held=True) as read:
        assert all(torch.equal(a, b) for a, b in zip(read, sent))
        assert processes.stopped(parent.pid)  # its commit buffer cannot change under the views
        CommitBuffer(parent.buffer.fd).write([torch.zeros(3, 5)])
        assert read[0].abs().sum() == 0  # views, not copies
    assert not processes.stopped(parent.pid)


# A launcher whose first child holds 1,000 floats (0, 1, 2, ...) and says where they are.
HOLDER = textwrap.dedent("""
    import array, os, time
    if os.fork() == 0:
        values = array.array("f", [float(i) for i in range(1000)])
        os.write(1, f"{values.buffer_info()[0]}\\n".encode())
    time.sleep(600)
""")


def test_located_tensors_are_read_from_the_workers_own_memory_and_only_as_much_as_allowed():
    """A timed call's outputs on the CPU are read where the worker left them (its first child's
    memory, the launcher's being the tree's root), its tree stopped meanwhile."""
    worker = worker_reading(HOLDER)
    worker._worker_pid = None
    try:
        address = int(worker.process.stdout.readline())
        ref = TensorRef(dtype="float32", shape=[10, 100], stride=[100, 1], storage_offset=0, device="cpu", address=address)
        with worker.reading([ref], "test", located_limit=4032) as (read,):  # 4,000 bytes, aligned
            assert torch.equal(read.flatten(), torch.arange(1000, dtype=torch.float32))
        assert worker.worker_pid != worker.pid
        with pytest.raises(ValueError, match="more than the 4031"):
            worker._host_bytes([ref], located_limit=4031)
        with pytest.raises(OSError):  # memory it has not mapped
            processes.read_memory(worker.worker_pid, 8, torch.empty(4).data_ptr(), 16)
    finally:
        processes.kill_tree(worker.pid)
        discard(worker)


# process_vm_readv's numbers, for a filter that stands in for a host that forbids it (as Yama's
# ptrace_scope 3 would; this test cannot change the machine's).
PROCESS_VM_READV = {"x86_64": [(0xC000003E, 310, None), (0x40000003, 347, None)], "aarch64": [(0xC00000B7, 270, None)]}


def test_a_host_that_forbids_reading_a_childs_memory_is_found_out_before_anything_runs(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import platform
        from harness.worker import confine, processes
        print(processes.reading_refused())
        confine.DENIABLE[platform.machine()]["process_vm_readv"] = {PROCESS_VM_READV}[platform.machine()]
        print(confine.deny(["process_vm_readv"]))
        print(processes.reading_refused())
    """)], capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()})
    before, denied, after = done.stdout.splitlines()[:3]
    assert (before, denied) == ("None", "True"), done.stderr
    assert after.startswith("Operation not permitted"), after


def test_a_cpu_run_on_such_a_host_stops_at_its_start_with_one_line(monkeypatch):
    monkeypatch.setattr(processes, "reading_refused", lambda: "Operation not permitted; Yama's ptrace_scope is 3")
    with pytest.raises(UsageError, match=r"^this host forbids .*\(Operation not permitted; Yama's ptrace_scope is 3\)"
                                         r".*ptrace_scope is 0 or 1 \(at 2, with CAP_SYS_PTRACE\)$") as refused:
        resolve_device("cpu")
    assert "\n" not in str(refused.value)


def test_memory_that_keeps_the_read_waiting_gets_the_tree_killed_at_the_phases_timeout(monkeypatch):
    """A read of memory that a stopped thread of the worker's would have to serve (a FUSE file, a
    userfaultfd) waits until that thread dies: here a read that returns only once the worker is
    gone, as the kernel's does. At the phase's timeout the tree is killed, and the worker stopped
    with that reason."""
    worker = worker_reading(HOLDER)
    worker._worker_pid, worker.timeout_s, worker.watchdog, worker.log_tail = None, 0.5, None, lambda limit=0: ""

    def waits_on_the_worker(pid, address, into, length):
        while processes.state(f"/proc/{pid}/stat") not in ("Z", "X", None):
            time.sleep(0.01)
        raise OSError(errno.EFAULT, "Bad address")

    monkeypatch.setattr(processes, "read_memory", waits_on_the_worker)
    try:
        address = int(worker.process.stdout.readline())
        ref = TensorRef(dtype="float32", shape=[1000], stride=[1], storage_offset=0, device="cpu", address=address)
        began = time.monotonic()
        with pytest.raises(WorkerStopped) as stopped:
            with worker.reading([ref], "test", located_limit=4096):
                pass
        assert time.monotonic() - began < 10
        assert stopped.value.stop.reason is StopReason.deadline and "within 0.5 s" in stopped.value.stop.error
        assert worker.process.poll() is not None  # killed and reaped
    finally:
        processes.kill_tree(worker.pid)
        discard(worker)


# A launcher whose first child holds 1,000 floats (0, 1, 2, ...) and a page it made read-only, and
# says where both are.
READ_ONLY_HOLDER = textwrap.dedent("""
    import array, ctypes, mmap, os, time
    if os.fork() == 0:
        values = array.array("f", [float(i) for i in range(1000)])
        page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = ctypes.addressof(ctypes.c_char.from_buffer(page))
        ctypes.CDLL(None).mprotect(ctypes.c_void_p(start), mmap.PAGESIZE, mmap.PROT_READ)
        os.write(1, f"{values.buffer_info()[0]} {start}\\n".encode())
    time.sleep(600)
""")


# A launcher whose worker (its first child) sleeps; once the worker has ended, it ends as the worker did.
ENDS_AS_ITS_WORKER = textwrap.dedent("""
    import os, sys, time
    worker = os.fork()
    if worker == 0:
        time.sleep(600)
        os._exit(0)
    os.write(1, b"ready\\n")
    _, status = os.waitpid(worker, 0)
    os.kill(os.getpid(), os.WTERMSIG(status)) if os.WIFSIGNALED(status) else sys.exit(os.WEXITSTATUS(status))
""")


def test_a_worker_that_ended_before_its_outputs_were_spoiled_says_how_it_ended():
    """Its memory is gone, which is no broken protocol: the verdict says what ended it."""
    worker = worker_reading(ENDS_AS_ITS_WORKER)
    worker._worker_pid, worker.watchdog, worker.given_code = None, None, True
    worker.log_tail = lambda limit=0: ""
    try:
        assert worker.process.stdout.readline() == b"ready\n"
        os.kill(worker.worker_pid, signal.SIGKILL)
        with pytest.raises(WorkerStopped) as stopped:
            worker.spoil([8], "timing")
        assert stopped.value.stop.reason is StopReason.died
        assert stopped.value.stop.error == "worker killed by SIGKILL during timing"
    finally:
        processes.kill_tree(worker.pid)
        discard(worker)


def test_outputs_are_spoiled_where_they_lie_read_only_pages_too():
    """Garbage written where the parent says, the worker's tree stopped meanwhile; a page the worker
    made read-only (a ring it would hide from the garbage) is written as a debugger writes it."""
    worker = worker_reading(READ_ONLY_HOLDER)
    worker._worker_pid = None
    try:
        values, page = map(int, worker.process.stdout.readline().split())
        worker.spoil([values + 4 * 7, values + 4 * 999, page + 64], "test")
        ref = TensorRef(dtype="float32", shape=[1000], stride=[1], storage_offset=0, device="cpu", address=values)
        with worker.reading([ref], "test", located_limit=4032) as (read,):
            spoiled = torch.isnan(read).nonzero().flatten().tolist()
        assert spoiled == [7, 999] and read[8] == 8
        raw = torch.empty(4, dtype=torch.uint8)
        processes.read_memory(worker.worker_pid, page + 64, raw.data_ptr(), 4)
        assert raw.tolist() == [255] * 4
        with pytest.raises(OSError):  # memory it has not mapped: the worker broke the protocol
            processes.spoil_memory(worker.worker_pid, [8])
    finally:
        processes.kill_tree(worker.pid)
        discard(worker)
