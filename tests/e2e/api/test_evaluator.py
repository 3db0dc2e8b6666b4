"""The Python API: in-memory answers judged through the eval pipeline, warm between
submissions, from several threads, with every worker gone once the Evaluator is closed."""

import hashlib
import os
import threading
import time

import pytest

import harness
from harness.store import Database
from harness.schedule import local
from harness.worker import processes
from harness.worker.parent import stop_run

from tests.support import DATA, require_ray

PROBLEMS = DATA / "problems"
RELU = "import torch, torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.clamp(x, min=0)  # {}\n"
ABS = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x.abs()\n"
HANGS = "import time, torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        time.sleep(3600)\n"
TRANSCRIPT = "Here is a faster ReLU.\n\n```python\n" + RELU.format("from a transcript") + "```\n"
NO_PYTHON = "Sorry, only Rust:\n```rust\nfn relu() {}\n```\n"
FAST = {"device": "cpu", "trials": 3, "timeout_s": 20}


@pytest.fixture
def options(build_dir):
    return FAST | {"build_dir": build_dir}


def test_submitted_code_and_transcripts_get_the_verdicts_of_eval(options):
    with harness.Evaluator(PROBLEMS, **options) as ev:
        ok, wrong, transcript = (ev.submit(code, "tiny_relu") for code in (RELU.format(1), ABS, TRANSCRIPT))
        assert ok.result().status is harness.Status.ok
        assert ok.result().candidate_hash == hashlib.sha256(RELU.format(1).encode()).hexdigest()
        assert ok.result().run_id == ev.run_id and ok.result().timing.n == 3
        assert wrong.result().status is harness.Status.mismatch
        assert wrong.result().diagnosis is not None and wrong.result().diagnosis.hint
        assert transcript.result().status is harness.Status.ok


def test_an_unknown_problem_or_option_is_a_one_line_error(options, tmp_path):
    with harness.Evaluator(PROBLEMS, **options) as ev:
        with pytest.raises(harness.UsageError, match="unknown problem id 'nope'.*tiny_relu"):
            ev.submit(RELU, "nope")
    with pytest.raises(harness.UsageError, match="trials"):
        harness.Evaluator(PROBLEMS, device="cpu", trials=0)
    with pytest.raises(harness.UsageError, match="backend"):
        harness.Evaluator(PROBLEMS, device="cpu", backend="spark")
    with pytest.raises(harness.UsageError, match="pass at the end of a whole run.*eval CANDIDATES --memcheck"):
        harness.Evaluator(PROBLEMS, device="cpu", memcheck=True)
    with pytest.raises(harness.UsageError, match="does not exist"):
        harness.Evaluator(tmp_path / "missing", device="cpu")


COUNTED_PROBLEM = '''import torch, torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        with open({log!r}, "a") as log:  # one line per reference worker that loads it
            log.write("loaded\\n")

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
'''


def test_the_reference_stays_loaded_from_one_submission_to_the_next(options, tmp_path):
    (tmp_path / "problems").mkdir()
    log = tmp_path / "loads.log"
    (tmp_path / "problems" / "counted.py").write_text(COUNTED_PROBLEM.format(log=str(log)))
    # Off: the problem writes its log outside any worker's scratch.
    with harness.Evaluator(tmp_path / "problems", sandbox="off", **options) as ev:
        statuses = [ev.submit(RELU.format(i), "counted").result().status for i in range(3)]
    assert statuses == [harness.Status.ok] * 3
    assert log.read_text().splitlines() == ["loaded"]


def test_submissions_from_several_threads_each_get_their_own_result(options):
    with harness.Evaluator(PROBLEMS, **options) as ev:
        futures: dict[str, list] = {}
        lock = threading.Lock()

        def submit(worker: int) -> None:
            for code in (RELU.format(f"thread {worker}"), ABS):
                future = ev.submit(code, "tiny_relu")
                with lock:
                    futures.setdefault(code, []).append(future)

        threads = [threading.Thread(target=submit, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results = {code: [f.result(timeout=300) for f in fs] for code, fs in futures.items()}
    assert len(results) == 4
    for code, judged in results.items():
        assert {r.candidate_hash for r in judged} == {hashlib.sha256(code.encode()).hexdigest()}
        assert {r.status for r in judged} == {harness.Status.mismatch if code == ABS else harness.Status.ok}


def test_map_yields_each_result_as_it_is_decided(options):
    with harness.Evaluator(PROBLEMS, **options) as ev:
        results = list(ev.map([(RELU.format("map"), "tiny_relu"), (NO_PYTHON, "tiny_relu"), (ABS, "tiny_relu")]))
    assert sorted(r.status.value for r in results) == ["load_error", "mismatch", "ok"], [(r.status, r.error) for r in results]
    assert results[0].status is harness.Status.load_error  # decided without a worker: first out


def test_closing_kills_every_worker_and_cancels_what_was_not_judged(options, monkeypatch):
    def slow_kill(token: str) -> None:
        stop_run(token)
        time.sleep(2)  # time for a lane to judge the worker just killed: that is no verdict

    monkeypatch.setattr(local, "stop_run", slow_kill)
    ev = harness.Evaluator(PROBLEMS, **options | {"timeout_s": 600})  # the hang outlasts the test
    hanging = ev.submit(HANGS, "tiny_relu")
    queued = ev.submit(RELU.format("queued"), "tiny_relu")
    deadline = time.monotonic() + 60
    while len(processes.descendants(os.getpid())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes.descendants(os.getpid()), "no worker started"
    ev.close()
    assert processes.descendants(os.getpid()) == []
    assert hanging.cancelled() and queued.cancelled()
    with pytest.raises(harness.UsageError, match="closed"):
        ev.submit(RELU, "tiny_relu")
    assert not ev._scratch.exists()  # the refused code was not written to a new one


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_closing_an_evaluator_on_ray_cancels_quietly(options):
    require_ray()
    ev = harness.Evaluator(PROBLEMS, backend="ray", **options | {"timeout_s": 600})
    hanging = ev.submit(HANGS, "tiny_relu")
    deadline = time.monotonic() + 120
    while not processes.descendants(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.2)  # Ray's own processes first, then the task's workers
    ev.close()
    assert hanging.cancelled()


def test_results_are_stored_as_a_run_when_given_a_database(options, tmp_path):
    with harness.Evaluator(PROBLEMS, db=tmp_path / "h.db", **options) as ev:
        result = ev.submit(ABS, "tiny_relu").result()
    with Database.existing(tmp_path / "h.db") as db:
        stored = db.results(ev.run_id)
        run, _ = db.run(ev.run_id)
    assert [r.model_dump(exclude={"recorded_at"}) for r in stored] == [result.model_dump(exclude={"recorded_at"})]
    assert run.finished_at is not None


def test_evaluate_takes_candidate_paths_and_code_in_the_order_given(options):
    results = harness.evaluate([DATA / "candidates" / "tiny_linear", (ABS, "tiny_relu"),
                                DATA / "candidates" / "tiny_relu" / "mismatch.py"], PROBLEMS, **options)
    assert [(r.candidate, r.status.value) for r in results] == [
        ("tiny_linear/ok_same_init.py", "ok"), ("tiny_linear/wrong_init.py", "mismatch"),
        (f"tiny_relu/{hashlib.sha256(ABS.encode()).hexdigest()[:16]}.py", "mismatch"),
        ("tiny_relu/mismatch.py", "mismatch")]


def test_the_ray_backend_is_the_same_api_and_cancels_no_finished_task(options, monkeypatch):
    require_ray()
    import ray
    cancelled = []  # force-cancelling a task whose reply is arriving kills the driver (Ray 2.60, exit 1)
    monkeypatch.setattr(ray, "cancel", lambda ref, **kwargs: cancelled.append(ref))
    [result] = harness.evaluate([(RELU.format("ray"), "tiny_relu")], PROBLEMS, backend="ray", jobs=1, **options)
    assert result.status is harness.Status.ok
    assert cancelled == []
