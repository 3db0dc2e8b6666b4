"""results.jsonl keeps every finished result, even after a kill mid-write."""

from harness.records import Result, Status
from harness.store import ResultStore


def make(name, status=Status.ok):
    return Result(run_id="r", problem="p", candidate=name, status=status, candidate_hash="h")


def test_append_then_read_back_in_order(tmp_path):
    store = ResultStore(tmp_path / "out")
    store.append(make("a"))
    store.append(make("b", Status.crash))
    assert [(r.candidate, r.status) for r in store.read_results()] == [("a", Status.ok), ("b", Status.crash)]


def test_a_line_cut_short_by_a_kill_is_skipped(tmp_path):
    store = ResultStore(tmp_path)
    store.append(make("a"))
    with open(store.results_path, "a") as out:
        out.write('{"run_id": "r", "problem": "p", "cand')
    assert [r.candidate for r in store.read_results()] == ["a"]
