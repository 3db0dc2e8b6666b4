"""Worker-side helpers: input casting per precision, plain-tensor outputs, parameter digests,
when timing inputs are made, and pinning to the cores a worker was given."""

import _thread
import concurrent.futures
import importlib.abc
import importlib.util
import multiprocessing
import os
import subprocess
import sys
import threading
import types

import pytest
import torch

from harness.records import Phase
from harness.worker import child as child_module
from harness.worker.child import (NotPlainTensor, Session, cast_inputs, failure, param_digests,
                                  pin_to_cpus, plain_outputs)
from harness.worker.protocol import MAX_SOURCE_CHARS, Command, CommitBuffer, Failure, FeedFile, WorkerJob, describe


def test_precision_casts_floating_inputs_but_never_class_indices():
    logits, targets = torch.randn(4, 3), torch.tensor([0, 2, 1, 1])
    cast = cast_inputs([logits, targets, 7], "cpu", torch.bfloat16)
    assert cast[0].dtype is torch.bfloat16 and cast[1].dtype is torch.int64 and cast[2] == 7


def test_outputs_must_be_plain_tensors():
    t = torch.ones(2)
    assert plain_outputs(t) == [t] and plain_outputs((t, t)) == [t, t]

    class Sub(torch.Tensor):
        pass

    for bad in (t.as_subclass(Sub), 3.0, (t, 1), [], None):
        with pytest.raises(NotPlainTensor):
            plain_outputs(bad)
    with pytest.raises(NotPlainTensor, match="2000 tensors"):  # more than a reply may describe
        plain_outputs([t] * 2000)


def test_parameter_digests_are_equal_for_equal_seeds_only():
    def build(seed):
        torch.manual_seed(seed)
        return param_digests(torch.nn.Linear(4, 3))
    assert build(1) == build(1)
    assert build(1) != build(2)
    assert [d.shape for d in build(1)] == [[3, 4], [3]]


def counting_problem():
    problem = types.SimpleNamespace(calls=0)

    def get_inputs():
        problem.calls += 1
        return [torch.randn(4, 8)]

    problem.get_inputs = get_inputs
    return problem


def session(problem, tmp_path, feed: int | None = None) -> Session:
    job = WorkerJob(role="candidate", problem_path="p.py", device="cpu", precision="fp32", init_seed=0)
    return Session(job, problem, torch.nn.ReLU(), CommitBuffer(os.memfd_create("test")),
                   feed=FeedFile(feed if feed is not None else os.memfd_create("feed")))


def timed_and_committed(worker: Session, command: Command) -> tuple[float, list[list[torch.Tensor]]]:
    """A timed command's time, and its outputs as its commit hands them over."""
    elapsed = worker.timed(command)
    return elapsed, worker.committed()


def test_a_timed_call_makes_its_inputs_from_the_seed_it_is_given(tmp_path):
    problem = counting_problem()
    worker = session(problem, tmp_path)
    elapsed, [outputs] = timed_and_committed(worker, Command(op="timed", seeds=[7]))
    [again] = timed_and_committed(worker, Command(op="timed", seeds=[7]))[1]
    [other] = timed_and_committed(worker, Command(op="timed", seeds=[8]))[1]
    assert problem.calls == 3 and elapsed.elapsed_ms > 0 and worker.unsummarized is None
    assert torch.equal(outputs[0], again[0]) and not torch.equal(outputs[0], other[0])


def test_a_timed_commands_outputs_are_committed_once_when_asked_for(tmp_path):
    """After the reply, apart from the timed calls, so that the parent's clock sees the commit
    apart; asked for again (or before any timed command) it is the candidate's failure."""
    worker = session(counting_problem(), tmp_path)
    with pytest.raises(RuntimeError):
        worker.committed()
    worker.timed(Command(op="timed", seeds=[1, 2], calls=2))
    assert len(worker.committed()) == 2
    with pytest.raises(RuntimeError):
        worker.committed()


def test_a_fed_call_runs_on_what_the_parent_wrote_and_makes_no_inputs(tmp_path):
    """On a CPU run the reference makes a timed call's inputs and the parent writes them into the
    worker's feed file: the worker makes none, and is told no seed it could make them from."""
    problem, feed = counting_problem(), os.memfd_create("feed")
    worker = session(problem, tmp_path, feed)
    for values in (torch.randn(4, 8), torch.randn(4, 8)):  # the same pages, rewritten for each call
        fed = CommitBuffer(feed).write([values[None]])  # stacked: a row per call
        _, [outputs] = timed_and_committed(worker, Command(op="timed", fed=fed))
        assert torch.equal(outputs[0], values.relu())
    assert problem.calls == 0


def test_a_batch_times_its_calls_back_to_back_each_on_its_own_inputs(tmp_path):
    """Several calls to one timed command (a CPU batch): made from their seeds, or fed one set
    after another; their outputs call after call."""
    problem, feed = counting_problem(), os.memfd_create("feed")
    worker = session(problem, tmp_path, feed)
    _, outputs = timed_and_committed(worker, Command(op="timed", seeds=[1, 2, 3], calls=3))
    assert problem.calls == 3 and len(outputs) == 3
    assert all(torch.equal(out, worker.inputs(seed)[0].relu()) for [out], seed in zip(outputs, [1, 2, 3]))
    stacked = torch.randn(3, 4, 8)
    _, outputs = timed_and_committed(worker, Command(op="timed", fed=CommitBuffer(feed).write([stacked]), calls=3))
    assert all(torch.equal(out, values.relu()) for [out], values in zip(outputs, stacked))
    refs = worker.buffer.write_stacked(outputs)  # as the reply describes them: a row per call
    assert refs[0].shape == [3, 4, 8]
    for index in range(3):
        [row] = worker.buffer.tensors([refs[0].row(index)])
        assert torch.equal(row, stacked[index].relu())


def test_a_batch_whose_calls_return_unlike_tensors_is_refused_at_its_commit(tmp_path):
    """What the calls returned is checked by the commit, which the parent times apart (see
    test_rows_for_the_next_fed_command_are_made_after_the_commit_on_no_clock)."""
    worker = session(counting_problem(), tmp_path)
    for second in ((torch.zeros(1), torch.zeros(1)), torch.zeros(2), torch.zeros(1, dtype=torch.int64), "text"):
        answers = iter([torch.zeros(1), second])
        worker.timed_model = lambda x: next(answers)
        worker.timed(Command(op="timed", seeds=[1, 2], calls=2))
        with pytest.raises(NotPlainTensor):
            worker.committed()


def test_rows_for_the_next_fed_command_are_made_after_the_commit_on_no_clock(tmp_path):
    """Made inside a timed command, a batch's per-call views of the feed were harness overhead
    the parent subtracts from a candidate's wall time, which a candidate feeding its own calls
    skipped. Made after the commit, they serve the next command of that layout once; a call that
    reshapes its input in place leaves the next command's rows as they were."""
    feed = os.memfd_create("feed")
    worker = session(counting_problem(), tmp_path, feed)
    fed = CommitBuffer(feed).write([torch.randn(3, 4, 8)])
    worker.timed_model = lambda x: x.unsqueeze_(0).relu()  # changes its input view's shape
    timed_and_committed(worker, Command(op="timed", fed=fed, calls=3))
    worker.prepare_rows()
    prepared = worker.next_rows[1]
    assert [row[0].shape for row in prepared] == [torch.Size([4, 8])] * 3
    assert worker.fed_rows(fed, 3) is prepared and worker.next_rows is None  # used once
    assert worker.fed_rows(fed, 3) is not prepared
    worker.prepare_rows()
    assert worker.fed_rows(fed, 2) is not worker.next_rows[1]  # another layout: made now, the prepared kept


def test_only_contiguous_cpu_tensor_inputs_can_be_fed(tmp_path):
    worker = session(counting_problem(), tmp_path)
    [stacked] = worker.feedable([1, 2])  # a row per seed
    assert torch.equal(stacked[1], worker.inputs(2)[0])
    worker.problem.get_inputs = lambda: [torch.randn(8, 4).t()]
    assert worker.feedable([1]) is None
    worker.problem.get_inputs = lambda: [torch.randn(4), 3]
    assert worker.feedable([1]) is None


def test_a_profiled_call_says_which_operators_ran_when_asked_next(tmp_path):
    worker = session(counting_problem(), tmp_path)
    elapsed = worker.timed(Command(op="timed", seeds=[1], profile=True))
    profile = worker.profile()
    assert "aten::relu" in profile.ops and profile.elapsed_ms == elapsed.elapsed_ms > 0
    with pytest.raises(RuntimeError, match="no profiled call"):  # each profile is read once
        worker.profile()


def test_a_profiled_call_shows_the_operators_its_forward_ran_on_other_threads(tmp_path):
    """The profiler records the calling thread's operators only unless told otherwise: a forward
    that hands the reference's operator to a thread of its own would show none."""
    worker = session(counting_problem(), tmp_path)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        worker.timed_model = lambda x: pool.submit(torch.relu, x).result()
        worker.timed(Command(op="timed", seeds=[1], profile=True))
        profile = worker.profile()
    assert "aten::relu" in profile.ops and profile.top_op_ms.get("aten::relu", 0) > 0


def test_a_profile_says_how_much_data_each_operator_read(tmp_path):
    """Each call's largest tensor argument, summed over calls: a sum divided by its count reads one
    element a division; a view names what it was taken from; a matmul whose tensors come as a list
    (einsum) read an amount the profile does not say."""
    worker = session(counting_problem(), tmp_path)
    total = torch.tensor(3.0)
    worker.timed_model = lambda x: (torch.einsum("...,...->", x, x), x.sum() / x.numel(), torch.div(total, 7),
                                    torch.mul(x[0, :1], 2))
    worker.timed(Command(op="timed", seeds=[1], profile=True))
    profile = worker.profile()
    assert profile.elements_read == {"aten::sum": 32, "aten::div": 2, "aten::mul": 1, "aten::select": 32,
                                     "aten::slice": 8}
    assert "aten::einsum" in profile.top_op_ms


def test_setting_up_the_profiler_does_not_import_inductor():
    """A worker's boot sets the profiler up; torch.profiler's wrapper would import torch._inductor
    doing so (7 s of every boot on the GPU machine)."""
    probe = ("import sys; from harness.worker.child import warm_profiler; warm_profiler('cpu'); "
             "print('torch._inductor' in sys.modules)")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                              env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert imported.stdout.strip() == "False"


def test_cpu_tensors_are_written_to_the_commit_buffer_before_they_are_described(tmp_path):
    buffer = CommitBuffer(os.memfd_create("test"))
    a, b = torch.arange(6.0).reshape(2, 3), torch.tensor([1, 2], dtype=torch.int64)
    refs = describe([a, b], buffer)
    assert [r.offset for r in refs] == [0, 64] and refs[0].shape == [2, 3]  # each at a 64-byte boundary
    back = torch.frombuffer(bytearray(os.pread(buffer.fd, a.nbytes, 0)), dtype=torch.float32).reshape(2, 3)
    assert torch.equal(back, a)
    assert os.pread(buffer.fd, b.nbytes, 64) == (1).to_bytes(8, "little") + (2).to_bytes(8, "little")


def test_worker_pins_every_thread_of_itself_to_the_cores_it_was_given_and_holds_them(monkeypatch):
    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, cpus: pinned.append((tid, set(cpus))))
    monkeypatch.setattr(child_module, "hold_affinity", lambda: pinned.append("held"))  # not this test process
    monkeypatch.setattr(torch, "set_num_threads", lambda n: pinned.append(n))
    started = threading.Event()
    thread = threading.Thread(target=started.wait)
    thread.start()
    try:
        pin_to_cpus([2, 3])
    finally:
        started.set()
        thread.join()
    assert pinned[-2:] == ["held", 2] and {tid for tid, _ in pinned[:-2]} >= {threading.get_native_id(), thread.native_id}
    assert all(cpus == {2, 3} for _, cpus in pinned[:-2])
    pinned.clear()
    pin_to_cpus(None)
    assert pinned == []


def test_threads_a_candidate_leaves_running_are_counted_however_they_were_started(monkeypatch):
    before = child_module.threads_alive()
    started, release, done = (_thread.allocate_lock() for _ in range(3))
    for lock in (started, release, done):
        lock.acquire()

    def wait():
        started.release()
        with release:
            pass
        done.release()

    _thread.start_new_thread(wait, ())  # never registered with threading
    started.acquire()
    monkeypatch.setattr(sys, "_current_frames", lambda: {})  # replaced after the worker started
    try:
        assert child_module.threads_alive() == before + 1
    finally:
        release.release()
        done.acquire()


def test_a_failure_shows_the_candidate_frames_not_the_workers_own(tmp_path):
    class Broken(torch.nn.Module):
        def forward(self, x):
            raise TypeError("'module' object is not callable")

    worker = session(counting_problem(), tmp_path)
    worker.model = Broken()
    with pytest.raises(TypeError) as raised:
        worker.trial(Command(op="trial", seed=1))
    lines = failure(Phase.correctness, raised.value).traceback
    assert not any("/harness/worker/" in line or "nn/modules/module.py" in line for line in lines), lines
    assert "in forward" in lines[-2] and lines[-1] == "TypeError: 'module' object is not callable"


def test_a_failed_build_sends_its_generated_sources_read_safely(tmp_path, monkeypatch):
    """The worker reads the sources of the extension named in the failure, from its build dir
    (named without the version a rebuild in one process adds): regular files only (a FIFO would
    block the read), each up to a limit."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    build_dir = tmp_path / "conv"
    build_dir.mkdir()
    (build_dir / "main.cpp").write_text("x" * (MAX_SOURCE_CHARS + 10))
    os.mkfifo(build_dir / "cuda.cu")
    built = failure(Phase.load, RuntimeError("Error building extension 'conv_v1': ninja: build stopped"))
    assert built.sources == {"main.cpp": "x" * MAX_SOURCE_CHARS}
    (build_dir / "cuda.cu").unlink()
    (build_dir / "cuda.cu").write_text("__global__ void k() {}\n")
    assert set(failure(Phase.load, RuntimeError("Error building extension 'conv'")).sources) == {"main.cpp", "cuda.cu"}
    assert failure(Phase.load, RuntimeError("no build here")).sources == {}
    assert failure(Phase.load, RuntimeError("Error building extension '../conv'")).sources == {}


def test_the_parent_takes_no_more_of_a_failure_than_a_worker_may_send():
    """A worker is the candidate's process: what it says about an exception is bounded where the
    parent reads it (too much is a broken protocol), not only where the worker truncates."""
    Failure(phase=Phase.load, exc_type="E", message="m", traceback=[], sources={"cuda.cu": "x" * MAX_SOURCE_CHARS})
    for too_much in ({"sources": {"cuda.cu": "x" * (MAX_SOURCE_CHARS + 1)}}, {"sources": {"/etc/passwd": "x"}},
                     {"traceback": ["line"] * 9}, {"message": "m" * 64_001}, {"exc_type": "E" * 201}):
        with pytest.raises(ValueError):
            Failure.model_validate({"phase": "load", "exc_type": "E", "message": "m", "traceback": [], **too_much})
    long_name = type("E" * 300, (Exception,), {})
    assert len(failure(Phase.load, long_name("x" * 70_000)).exc_type) == 200  # the worker truncates first


def test_any_exception_becomes_a_failure_the_parent_can_read():
    """A message with a lone surrogate (bytes decoded with surrogateescape) or a __str__ that
    raises is still a failure the worker can send: otherwise the worker dies and an honest
    exception reads as a crash."""

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    for exc in (RuntimeError(b"caf\xe9".decode("utf-8", "surrogateescape")), Unprintable()):
        sent = failure(Phase.load, exc)
        assert Failure.model_validate_json(sent.model_dump_json()) == sent
    assert "could not be read" in failure(Phase.load, Unprintable()).message


def test_a_worker_readies_itself_for_each_boot_command_then_takes_its_job(monkeypatch):
    warmed = []
    monkeypatch.setattr(child_module, "warm_ahead", lambda job_waiting: warmed.append(True))
    parent_end, child_end = multiprocessing.Pipe()
    job = WorkerJob(role="candidate", problem_path="p", device="cpu", precision="fp32", init_seed=0)
    for command in (Command(op="boot"), Command(op="boot"), Command(op="job", job=job)):
        parent_end.send_bytes(command.model_dump_json().encode())
    assert child_module.next_job(child_end).op == "job" and warmed == [True, True]


def fake_triton(monkeypatch, key) -> list[str]:
    """A stand-in Triton package (none is installed on the CPU machine) whose kernel key is `key`;
    returns the names of its modules imported from then on."""
    imported = []
    for name in ("triton", "triton.runtime", "triton.experimental"):
        package = types.ModuleType(name)
        package.__path__ = []
        monkeypatch.setitem(sys.modules, name, package)
    cache = types.ModuleType("triton.runtime.cache")
    cache.triton_key = key
    monkeypatch.setitem(sys.modules, "triton.runtime.cache", cache)
    for name in ("triton.experimental.gluon", "triton.experimental.gluon.nvidia", "triton.experimental.gluon.nvidia.hopper"):
        # Imported for real below: set and taken out again, monkeypatch removes them at the end.
        monkeypatch.setitem(sys.modules, name, None)
        del sys.modules[name]

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            imported.append(module.__name__)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            gluon = name.startswith("triton.experimental.gluon")
            return importlib.util.spec_from_loader(name, Loader(), is_package=True) if gluon else None

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    return imported


def test_a_booting_spare_computes_tritons_kernel_key_and_imports_what_a_first_launch_does(monkeypatch):
    """The key Triton hashes from its own code at a process's first launch is computed as a GPU
    spare boots, with the modules that launch's specialization imports."""
    readied = []
    imported = fake_triton(monkeypatch, lambda: readied.append("triton key"))
    monkeypatch.setattr(child_module, "warm_meta", lambda: readied.append("meta kernels"))
    child_module.warm_ahead(lambda: False)
    assert readied == ["meta kernels", "triton key"]
    assert imported[-1] == "triton.experimental.gluon.nvidia.hopper"


@pytest.mark.parametrize("job_sent", [False, True])
def test_a_spare_whose_job_came_while_it_booted_leaves_triton_to_the_first_launch(monkeypatch, job_sent):
    """A run's first workers (the first reference's) get their jobs while booting: they are not
    kept from them by Triton's part of the boot."""
    readied = []
    fake_triton(monkeypatch, lambda: readied.append("triton key"))
    monkeypatch.setattr(child_module, "warm_meta", lambda: readied.append("meta kernels"))
    parent_end, child_end = multiprocessing.Pipe()
    job = WorkerJob(role="reference", problem_path="p", device="cuda", precision="fp32", init_seed=0)
    commands = [Command(op="boot")] + ([Command(op="job", job=job)] if job_sent else [])
    for command in commands:
        parent_end.send_bytes(command.model_dump_json().encode())
    # Otherwise sent once the boot is done: the worker waits for it.
    later = threading.Timer(0.5, lambda: parent_end.send_bytes(Command(op="job", job=job).model_dump_json().encode()))
    if not job_sent:
        later.start()
    try:
        assert child_module.next_job(child_end).op == "job"
        assert readied == (["meta kernels"] if job_sent else ["meta kernels", "triton key"])
    finally:
        later.cancel()
        if later.is_alive():
            later.join()
        parent_end.close()
        child_end.close()


def test_a_triton_keyed_where_older_versions_keep_the_key_is_readied_too(monkeypatch):
    readied = []
    fake_triton(monkeypatch, lambda: readied.append("triton key"))
    monkeypatch.delitem(sys.modules, "triton.runtime.cache")  # Triton 3.3 and earlier: no key there
    compiler = types.ModuleType("triton.compiler.compiler")
    compiler.triton_key = lambda: readied.append("older triton key")
    monkeypatch.setitem(sys.modules, "triton.compiler", types.ModuleType("triton.compiler"))
    monkeypatch.setitem(sys.modules, "triton.compiler.compiler", compiler)
    child_module.warm_triton()
    assert readied == ["older triton key"]


def test_a_triton_that_cannot_be_readied_leaves_the_boot_to_go_on(monkeypatch):
    def broken_key():
        raise RuntimeError("another version's layout")

    fake_triton(monkeypatch, broken_key)
    child_module.warm_triton()  # no exception: the first launch pays, as without it


def test_timed_outputs_are_located_where_they_are_and_their_layouts_checked_after_the_read():
    """The reply says where each call's outputs start, with the first call's layout; rows of one
    storage (an input fed in place) are places like any other, and a layout that differs only in
    a length-1 dimension's stride is the same layout."""
    from harness.worker.child import laid_out_alike, located

    stacked = torch.arange(12.0).reshape(3, 4)
    rows = [stacked[index] for index in range(3)]
    refs, addresses = child_module.located(rows)
    assert refs[0].shape == [4] and refs[0].storage_offset == 0 and refs[0].address == rows[0].data_ptr()
    assert addresses == [[row.data_ptr()] for row in rows]
    pair = located([(torch.ones(2), torch.zeros(3, dtype=torch.int64)), (torch.ones(2), torch.zeros(3, dtype=torch.int64))])
    assert [ref.dtype for ref in pair[0]] == ["float32", "int64"] and all(len(places) == 2 for places in pair[1])
    laid_out_alike([torch.ones(1, 4), torch.ones(4, 1).t()])  # strides (4, 1) and (1, 1): one layout
    with pytest.raises(NotPlainTensor, match="other shapes"):
        laid_out_alike([torch.ones(4), torch.ones(5)])
    with pytest.raises(NotPlainTensor):
        located([{"not": "a tensor"}])
