"""Each model's figures where a run is compared or exported (issue 53): `compare` sets each
model's row of the model table in one run beside its row in the other, and every exported result
carries the model and sample its path names, the export's figures given per model too."""

import csv
import io
import json
import re

from harness.present.compare import compare_runs, describe_changes, render_compare
from harness.present.export import to_csv, to_jsonl, write_export
from harness.records import Result, Status
from tests.unit.present.html_tree import parse


def sampled(model: str, problem: str, k: int, status: Status, speedup: float | None = None) -> Result:
    return Result(run_id="r", problem=problem, candidate=f"{problem}/{model}_sample_{k}.py", status=status,
                  speedup=speedup if status is Status.ok else None, candidate_hash=f"{model}{problem}{k}")


# gpt-5 before: 1 of 2 correct on each of two problems; after: both correct on both (one 4x).
# claude-4 is new in the second run, every sample failing.
BEFORE = [sampled("gpt-5", p, k, Status.ok if k == 0 else Status.mismatch, 2.0) for p in ("1_a", "2_b") for k in range(2)]
AFTER = ([sampled("gpt-5", p, k, Status.ok, 4.0 if (p, k) == ("1_a", 1) else 2.0) for p in ("1_a", "2_b") for k in range(2)]
         + [sampled("claude-4", p, k, Status.compile_error) for p in ("1_a", "2_b") for k in range(2)])


def test_compare_gives_each_models_figures_before_and_after_for_models_of_either_run():
    comparison = compare_runs(BEFORE, AFTER)
    assert [m.model for m in comparison.models] == ["claude-4", "gpt-5"]
    claude, gpt = comparison.models
    assert claude.before is None and claude.after.figures.attempted == 4
    assert gpt.before.pass_at["1"] == 0.5 and gpt.after.pass_at["1"] == 1.0
    lines = {line.split(":")[0]: line for line in describe_changes(comparison).splitlines() if line.startswith("model ")}
    assert lines["model gpt-5"] == ("model gpt-5: attempted 4 -> 4, correct 50% -> 100%, pass@1 50% -> 100%, pass@5 – -> –, "
                                    "compiled 100% -> 100%, geomean speedup 2.00x -> 2.38x, fast_0 50% -> 100%, "
                                    "fast_1 50% -> 100%, fast_1.5 50% -> 100%, fast_2 0% -> 25%")
    assert lines["model claude-4"].startswith("model claude-4: attempted 0 -> 4, correct – -> 0%, pass@1 – -> 0%")


def test_the_comparison_page_has_a_row_per_model_with_each_figure_before_and_after(tmp_path):
    page = render_compare("r1", "r2", compare_runs(BEFORE, AFTER), tmp_path / "c.html", tmp_path / "a", tmp_path / "b")
    table = parse(page.read_text()).find("table", id="models")
    header = [th.text for th in table.find("thead").find_all("th")]
    assert header == ["model", "attempted", "correct", "pass@1", "pass@5", "compiled", "geomean speedup",
                      "fast_0", "fast_1", "fast_1.5", "fast_2"]
    rows = {tr.attrs["data-model"]: [td.text for td in tr.find_all("td")[1:]] for tr in table.find("tbody").find_all("tr")}
    assert rows["gpt-5"][:4] == ["4 → 4", "50% → 100%", "50% → 100%", "– → –"]
    assert rows["claude-4"][:2] == ["0 → 4", "– → 0%"]


def test_a_comparison_of_runs_whose_paths_name_no_model_has_no_model_table(tmp_path):
    plain = [r.model_copy(update={"candidate": f"{r.problem}/kernel_{i}.py"}) for i, r in enumerate(BEFORE)]
    comparison = compare_runs(plain, plain)
    assert comparison.models == [] and "model " not in describe_changes(comparison)
    page = render_compare("r1", "r2", comparison, tmp_path / "c.html", tmp_path / "a", tmp_path / "b")
    assert not parse(page.read_text()).find_all("table", id="models")
    # Against a run whose paths do name models, such a run is one row, not left out.
    against = compare_runs(plain, AFTER)
    assert [m.model for m in against.models] == ["(unnamed)", "claude-4", "gpt-5"]
    assert against.models[0].before.figures.attempted == 4 and against.models[0].after is None


def test_compare_groups_by_the_pattern_given():
    by_letter = compare_runs(BEFORE, AFTER, pattern=re.compile(r"/([a-z])"))
    assert [m.model for m in by_letter.models] == ["c", "g"]


def test_group_by_is_taken_by_every_command_that_reads_a_run(capsys):
    from harness import cli
    from harness.present.summary import selected

    for command in ("report", "compare", "export"):
        assert cli.main([command, "--help"]) == 0
        assert "--group-by REGEX" in capsys.readouterr().out, command
    # --model names a model as the table does, --group-by's where one is given
    assert selected(AFTER, None, "c", re.compile(r"/([a-z])")) == AFTER[4:]


def test_exported_rows_carry_their_model_and_sample():
    results = BEFORE + [Result(run_id="r", problem="1_a", candidate="1_a/hand_written.py", status=Status.ok, speedup=1.0,
                               candidate_hash="h")]
    rows = list(csv.DictReader(io.StringIO(to_csv(results))))
    assert [(r["candidate"], r["model"], r["sample"]) for r in rows][-2:] == [
        ("2_b/gpt-5_sample_1.py", "gpt-5", "1"), ("1_a/hand_written.py", "(unnamed)", "")]
    lines = [json.loads(line) for line in to_jsonl(results).splitlines()]
    assert [(line["model"], line["sample"]) for line in lines][:2] == [("gpt-5", 0), ("gpt-5", 1)]
    assert Result.model_validate(lines[0]) == results[0]  # still a result, read back
    assert json.loads(to_jsonl(results, re.compile(r"/(\w)")).splitlines()[0])["model"] == "g"


def test_kernelbench_export_names_the_model_in_metadata_and_gives_fast_p_per_model(tmp_path):
    # AFTER: <model>_sample_<k> files, two models: KernelBench's sample ids are the next free ones
    write_export("kernelbench", AFTER, "H200", tmp_path / "kb", {r.problem: 1 for r in AFTER})
    samples = json.loads((tmp_path / "kb" / "level_1" / "eval_results.json").read_text())["1"]
    assert set(samples[0]) == {"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats", "ref_runtime"}
    assert [(s["sample_id"], s["metadata"]["model"], s["metadata"]["sample"]) for s in samples] == [
        (0, "claude-4", 0), (1, "claude-4", 1), (2, "gpt-5", 0), (3, "gpt-5", 1)]
    fast_p = json.loads((tmp_path / "kb" / "level_1" / "fast_p.json").read_text())
    models = {m["model"]: m for m in fast_p["models"]}
    assert set(models) == {"gpt-5", "claude-4"} and fast_p["correct_rate"] == 0.5
    assert (models["gpt-5"]["correct_rate"], models["gpt-5"]["pass_at"]["1"], models["gpt-5"]["fast_p"]["1"]) == (1.0, 1.0, 1.0)
    assert (models["claude-4"]["compiled_rate"], models["claude-4"]["pass_at"]["1"]) == (0.0, 0.0)


def test_kernelbench_files_of_two_models_that_name_one_sample_are_exported_a_model_at_a_time(tmp_path):
    """KernelBench's readers keep one sample per id ("Multiple entries for sample_id = 0"): two
    models' level_1_problem_1_sample_0_kernel.py had both been written as sample 0."""
    import pytest

    from harness.present.export import ExportError
    from harness.present.summary import selected

    kernelbench = [Result(run_id="r", problem="1_x", candidate=f"{model}/level_1_problem_1_sample_{s}_kernel.py",
                          status=Status.ok, speedup=2.0, candidate_hash=f"{model}{s}")
                   for model in ("gpt-5", "claude-4") for s in (0, 1)]
    with pytest.raises(ExportError, match=r"level_1/1 sample 0: claude-4/level_1_problem_1_sample_0_kernel.py, "
                                          r"gpt-5/level_1_problem_1_sample_0_kernel.py; .*--model"):
        write_export("kernelbench", kernelbench, "H200", tmp_path / "kb", {"1_x": 1})
    assert not (tmp_path / "kb").exists()
    write_export("kernelbench", selected(kernelbench, None, "gpt-5"), "H200", tmp_path / "kb", {"1_x": 1})
    samples = json.loads((tmp_path / "kb" / "level_1" / "eval_results.json").read_text())["1"]
    assert [(s["sample_id"], s["metadata"]["model"]) for s in samples] == [(0, "gpt-5"), (1, "gpt-5")]
