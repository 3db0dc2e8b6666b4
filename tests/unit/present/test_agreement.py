"""One definition of each figure (present/summary.py): the site, the end-of-run summary,
`compare` and the export render the same numbers from one run, per model too, skipped candidates
counted nowhere as attempted."""

from harness.present.compare import compare_runs, describe_changes
from harness.present.site import render_index
from harness.present.summary import format_rate, summarize_run, summary_table
from harness.records import Result, Status

from tests.unit.present.html_tree import parse
from tests.unit.present.synthetic import GENERATORS, synthetic_results


def with_skipped(results: list[Result]) -> list[Result]:
    """The synthetic run, plus a problem whose every candidate was skipped (CUDA ones on a CPU run)
    and skipped candidates beside judged ones."""
    skipped = [Result(run_id="r", problem="conv2d_square", candidate=f"conv2d_square/{i}.py", status=Status.skipped,
                      error="cuda candidate needs a GPU", candidate_hash=f"s{i}") for i in range(4)]
    beside = [r.model_copy(update={"candidate": r.candidate + ".cu", "status": Status.skipped, "speedup": None})
              for r in results[:5]]
    return results + skipped + beside


def test_the_site_the_summary_and_compare_agree_on_every_figure():
    results = with_skipped(synthetic_results(120))
    whole = summarize_run(results)
    page = parse(render_index(None, results))
    cards = {card: page.find("b", id=card).text for card in ("correct-rate", "compiled-rate", "fast-1")}
    assert cards == {"correct-rate": format_rate(whole.correct_rate), "compiled-rate": format_rate(whole.compiled_rate),
                     "fast-1": format_rate(whole.fast_p["1"])}
    terminal = summary_table(results, "index.html")
    assert f"{whole.attempted} attempted: correct {cards['correct-rate']}, compiled {cards['compiled-rate']}" in terminal
    compared = describe_changes(compare_runs(results, results))
    assert f"correct {cards['correct-rate']} -> {cards['correct-rate']}" in compared
    assert f"compiled {cards['compiled-rate']} -> {cards['compiled-rate']}" in compared

    overview = {row.attrs["data-problem"]: row.find_all("td")[1].text for row in page.find("table", id="overview-table")
                .find("tbody").find_all("tr")}
    for problem in {r.problem for r in results}:
        mine = [r for r in results if r.problem == problem]
        figures = summarize_run(mine)
        expected = f"{figures.correct}/{figures.attempted}"
        heading = page.find("section", id=problem).find("h2").text
        assert overview[problem] == expected, problem
        assert any(line.startswith(problem[:30]) and f" {expected} " in line for line in terminal.splitlines()), problem
        assert f"{figures.correct} of {figures.attempted} attempted correct" in heading, heading


def test_a_run_where_nothing_was_attempted_has_no_rates_rather_than_zero():
    """conv2d_square's four skipped CUDA candidates read "0 of 4 correct", and `compare` against
    such a run "correct 67% -> 0%"."""
    skipped = with_skipped([])
    page = parse(render_index(None, skipped))
    assert page.find("b", id="correct-rate").text == "–" and page.find("b", id="compiled-rate").text == "–"
    assert "0 of 0 attempted correct, 4 skipped" in page.find("section", id="conv2d_square").find("h2").text
    judged = synthetic_results(30)
    assert "correct " + format_rate(summarize_run(judged).correct_rate) + " -> –" in describe_changes(compare_runs(judged, skipped))
    assert "nothing attempted" in summary_table(skipped, "index.html")


def test_the_json_summary_holds_the_figures_the_site_shows():
    """summary.json beside results.jsonl: the run's figures, per problem and per model."""
    import json

    from harness.present.summary import summary_json

    results = with_skipped(synthetic_results(120))
    written = json.loads(summary_json(results))
    whole = summarize_run(results)
    assert written["run"]["correct_rate"] == whole.correct_rate and written["run"]["attempted"] == whole.attempted
    assert written["problems"]["conv2d_square"]["attempted"] == 0 and written["problems"]["conv2d_square"]["correct_rate"] is None
    assert {m["model"] for m in written["models"]} == set(GENERATORS) | {"(unnamed)"}
    assert all(set(m["pass_at"]) == {"1", "5"} for m in written["models"])


def test_reading_commands_select_by_verdict_and_by_model():
    from harness.present.summary import selected

    results = synthetic_results(120)
    ok = selected(results, frozenset({"ok"}), None)
    assert ok and all(r.status is Status.ok for r in ok)
    mine = selected(results, None, GENERATORS[1])
    assert mine and all(f"/{GENERATORS[1]}/" in r.candidate for r in mine)
    assert len(selected(results, frozenset({"ok", "mismatch"}), GENERATORS[1])) == \
        sum(r.status.value in ("ok", "mismatch") for r in mine)


def test_history_gives_a_problem_or_a_model_run_by_run():
    from harness.present.summary import history_table
    from harness.store import RunListed

    def run(run_id, day):
        return RunListed(run_id=run_id, started_at=f"2026-12-0{day}T10:00:00", finished_at="x", device="cuda",
                         device_name="H100", candidates_dir="c", verdicts={})
    before = [Result(run_id="r1", problem="relu", candidate=f"relu/gpt-5_sample_{k}.py", candidate_hash=f"a{k}",
                     status=Status.ok if k == 0 else Status.mismatch, speedup=1.5 if k == 0 else None) for k in range(2)]
    after = [r.model_copy(update={"run_id": "r2", "status": Status.ok, "speedup": 2.0 + i}) for i, r in enumerate(before)]
    lines = history_table([(run("r1", 1), before), (run("r2", 2), after)], "relu", None).splitlines()
    assert [line.split()[0] for line in lines[1:]] == ["r1", "r2"]
    assert lines[1].split()[3:7] == ["1/2", "50%", "1.50x", "relu/gpt-5_sample_0.py"]
    assert lines[2].split()[3:7] == ["2/2", "100%", "3.00x", "relu/gpt-5_sample_1.py"]
    assert history_table([(run("r1", 1), before)], None, "gpt-5").splitlines()[1].split()[3] == "1/2"
    assert history_table([(run("r1", 1), before)], None, "claude") == "no run has candidates of model claude"


def test_each_models_figures_agree_across_the_site_the_terminal_compare_and_the_export(tmp_path):
    """One model table (`model_table`) behind the site's Models table, the end-of-run table, each
    model's line and row in `compare`, and the export's rows and fast_p.json."""
    import csv
    import io
    import json

    from harness.present.compare import render_compare
    from harness.present.export import to_csv, write_export
    from harness.present.summary import PASS_AT, clip, format_speedup, model_table

    results = with_skipped(synthetic_results(120))
    table = model_table(results)
    assert {row.model for row in table} == set(GENERATORS) | {"(unnamed)"}

    def shown(row):  # correct rate, pass@1, pass@5, fast_1, geomean, as every view prints them
        return [format_rate(row.figures.correct_rate), *(format_rate(row.pass_at[f"{k}"]) for k in PASS_AT),
                format_rate(row.figures.fast_p["1"]), format_speedup(row.figures.geomean_speedup)]
    expected = {row.model: shown(row) for row in table}

    page = parse(render_index(None, results))
    site = {tr.find("td").text: [td.text for td in tr.find_all("td")[1:]]
            for tr in page.find("table", id="generator-table").find("tbody").find_all("tr")}
    def as_terminal(speedup: str) -> str:  # the site writes 1.06× and – where the terminal writes 1.06x and -
        return speedup.replace("×", "x").replace("–", "-")
    assert {m: [c[3].split("(")[1].rstrip(")"), c[4], c[5], c[7], as_terminal(c[8])] for m, c in site.items()} == expected

    terminal = summary_table(results, "index.html").splitlines()
    for model, figures in expected.items():
        (line,) = [line for line in terminal if line.startswith(clip(model, 30) + " ")]
        assert line.split()[-5:] == figures, model

    comparison = compare_runs(results, results)
    def after(figures: str) -> dict[str, str]:  # "correct 32% -> 32%, pass@1 ..." -> {"correct": "32%", ...}
        return {name: value for name, _, _, value in (item.rsplit(" ", 3) for item in figures.split(", "))}
    lines = {line[len("model "):].split(": ", 1)[0]: after(line.split(": ", 1)[1])
             for line in describe_changes(comparison).splitlines() if line.startswith("model ")}
    names = ["correct", *(f"pass@{k}" for k in PASS_AT), "fast_1", "geomean speedup"]
    assert {model: [figures[name] for name in names] for model, figures in lines.items()} == expected
    compared = parse(render_compare("r", "r", comparison, tmp_path / "c.html", tmp_path, tmp_path).read_text())
    header = [th.text for th in compared.find("table", id="models").find_all("th")][1:]
    for tr in compared.find("table", id="models").find("tbody").find_all("tr"):
        cells = dict(zip(header, (td.text.split(" → ")[1] for td in tr.find_all("td")[1:])))
        assert [cells[name] for name in names] == expected[tr.attrs["data-model"]]

    rows = list(csv.DictReader(io.StringIO(to_csv(results))))
    assert {m: sum(r["model"] == m for r in rows) for m in expected} == {m: int(cells[2]) for m, cells in site.items()}
    write_export("kernelbench", results, "H200", tmp_path / "kb", {})
    fast_p = {m["model"]: m for m in json.loads((tmp_path / "kb" / "fast_p.json").read_text())["models"]}
    for model, figures in expected.items():  # skipped candidates are not exported: a model of none attempted is absent
        mine = fast_p.get(model)
        assert (mine is None and figures[0] == "–") or [
            format_rate(mine["correct_rate"]), *(format_rate(mine["pass_at"][f"{k}"]) for k in PASS_AT),
            format_rate(mine["fast_p"]["1"]), format_speedup(mine["geomean_speedup"])] == figures, model
