"""The pytest plugin, as a user's project sees it: `pytest --harness-problems` finds broken and
useless problem files, `pytest --harness-candidates` turns verdicts into test outcomes and JUnit XML."""

import importlib.metadata
import shutil
import xml.etree.ElementTree as ET

import pytest
import torch

from tests.support import DATA, EXPECTED, REPO

pytest_plugins = ["pytester"]

GOOD = (DATA / "problems" / "tiny_relu.py").read_text()
DEGENERATE = GOOD.replace("return torch.relu(x)", "return torch.relu(x) * 1e-9  # all-zeros passes")
RAISES = GOOD.replace("return torch.relu(x)", 'raise ValueError("forward is not written yet")')


def test_the_plugin_is_registered_through_the_pytest11_entry_point():
    plugins = {e.name: e.value for e in importlib.metadata.entry_points(group="pytest11")}
    assert plugins.get("harness") == "harness.pytest_plugin"


def test_problems_folder_gets_one_test_per_file_each_failure_with_its_reason(pytester):
    problems = pytester.mkdir("problems")
    (problems / "good.py").write_text(GOOD)
    (problems / "degenerate.py").write_text(DEGENERATE)
    (problems / "raises.py").write_text(RAISES)
    # In its own process, as a user runs it: torch's import-time noise must not reach the summary.
    run = pytester.runpytest_subprocess("--harness-problems", "problems", "--harness-device", "cpu", "-rf")
    run.assert_outcomes(passed=1, failed=2, warnings=0)
    run.stdout.fnmatch_lines_random([
        "FAILED problems/degenerate.py::check - zeros_pass*", "FAILED problems/raises.py::check - reference_failed*",
        "zeros_pass, *: an all-zeros output is within tolerance*",  # the whole reason, in one line
        "reference_failed: *ValueError: forward is not written yet"])


def test_a_file_that_is_not_a_problem_fails_with_what_it_lacks(pytester):
    problems = pytester.mkdir("problems")
    (problems / "good.py").write_text(GOOD)
    (problems / "no_inputs.py").write_text(GOOD.replace("def get_inputs", "def inputs"))
    (problems / "broken.py").write_text("class Model(:\n")
    run = pytester.runpytest_inprocess("--harness-problems", "problems", "--harness-device", "cpu", "-rf")
    run.assert_outcomes(passed=1, failed=2)
    run.stdout.fnmatch_lines_random(["FAILED problems/no_inputs.py::check*", "*no_inputs.py*get_inputs*",
                                     "FAILED problems/broken.py::check*", "*broken.py: not valid Python*"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where torch sees no GPU")
def test_a_setting_the_run_cannot_start_with_ends_the_session_in_one_line(pytester):
    problems = pytester.mkdir("problems")
    (problems / "good.py").write_text(GOOD)
    (problems / "other.py").write_text(GOOD)
    run = pytester.runpytest_inprocess("--harness-problems", "problems", "--harness-device", "cuda")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    output = run.stdout.str() + run.stderr.str()
    assert output.count("harness: --device cuda, but torch sees no CUDA device here") == 1, output
    assert "Traceback" not in output and "UsageError" not in output, output


def test_references_no_candidate_can_be_held_to_fail(pytester):
    problems = pytester.mkdir("problems")
    (problems / "nan.py").write_text(GOOD.replace("return torch.relu(x)", "return torch.log(x)  # NaN below zero"))
    noisy = GOOD.replace("return torch.relu(x)", "return x + time.perf_counter_ns() % 997  # the clock, not a seed")
    (problems / "noisy.py").write_text("import time\n" + noisy)
    run = pytester.runpytest_inprocess("--harness-problems", "problems", "--harness-device", "cpu")
    run.assert_outcomes(failed=2)
    run.stdout.fnmatch_lines_random(["non_finite: an output holds NaN or Inf*",
                                     "non_deterministic: the same inputs gave outputs that differ*"])


def test_other_tests_run_only_when_named(pytester):
    pytester.mkdir("problems")
    (pytester.path / "problems" / "good.py").write_text(GOOD)
    pytester.makepyfile(test_other="def test_other():\n    pass\n")
    pytester.runpytest_inprocess("--harness-problems", "problems", "--harness-device", "cpu").assert_outcomes(passed=1)
    pytester.runpytest_inprocess("test_other.py", "--harness-problems", "problems",
                                 "--harness-device", "cpu").assert_outcomes(passed=2)


def test_a_missing_problems_dir_is_a_usage_error(pytester):
    run = pytester.runpytest_inprocess("--harness-problems", "nowhere")
    assert run.ret == 4  # pytest's usage error
    run.stderr.fnmatch_lines(["*harness: problems directory*nowhere does not exist*"])


def test_candidates_become_tests_with_verdicts_as_outcomes_and_junit_xml(pytester, build_dir):
    shutil.copytree(DATA / "candidates", pytester.path / "candidates")
    shutil.copytree(DATA / "problems", pytester.path / "problems")
    run = pytester.runpytest_inprocess("--harness-candidates", "candidates", "--harness-device", "cpu",
                                       "--harness-trials", "3", "--harness-timeout", "20",
                                       "--harness-build-dir", str(build_dir), "--junitxml", "junit.xml", "-rfs")
    verdicts = list(EXPECTED.values())
    run.assert_outcomes(passed=verdicts.count("ok"), skipped=verdicts.count("skipped"),
                        failed=len(verdicts) - verdicts.count("ok") - verdicts.count("skipped"))
    run.stdout.fnmatch_lines_random(["FAILED candidates/tiny_relu/mismatch.py::verdict - mismatch: *",
                                     "FAILED candidates/tiny_relu/timeout.py::verdict - timeout*",
                                     "SKIPPED * cuda candidate needs a CUDA GPU*",
                                     "harness: candidates' results stored in *harness.db as run *"])
    cases = list(ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"))
    assert len(cases) == len(EXPECTED)
    for name, status in EXPECTED.items():
        # JUnit's classname is the node id's path, dotted, without .py
        [case] = [c for c in cases if c.get("classname").endswith("candidates." + name.replace("/", ".").removesuffix(".py"))]
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert properties["status"] == status, name
        outcome = {child.tag for child in case} & {"failure", "skipped"}
        assert outcome == ({"skipped"} if status == "skipped" else set() if status == "ok" else {"failure"}), name
        if outcome == {"failure"}:
            message = case.find("failure").get("message")
            assert message.startswith(f"{status}: "), message
            assert "hint: " in case.find("failure").text, name


def test_the_shipped_problems_pass_their_checks(pytester):
    run = pytester.runpytest_inprocess("--harness-problems", str(REPO / "problems"), "--harness-device", "cpu")
    run.assert_outcomes(passed=len(list((REPO / "problems").glob("*.py"))))
