"""Integrity checks as a registry: a check is found by its module alone, asked at its moment in its
order, and what the findings of a moment come to is decided in verdicts.py."""

import sys
import textwrap

import pytest

from harness.cpu.device import Cpu
from harness.judge import checking, verdicts
from harness.judge.checking import Check, Finding, Moment, Shapes, Trial, Trials, checks_in, look
from harness.judge.diagnose import diagnose
from harness.judge.gpu import Gpu
from harness.records import Result, Status


def test_every_check_is_found_with_a_moment_and_its_flags_are_the_results_vocabulary():
    checks = checking.common()
    assert {c.name for c in checks} >= {"input_mutation", "input_insensitive", "reference_fallback", "hidden_operators",
                                         "inconsistent_when_timed", "inconsistent_when_profiled", "faster_than_hardware",
                                         "timing_disagrees", "shape_specialized", "no_custom_kernel", "init_differs"}
    assert len({c.name for c in checks}) == len(checks)  # a name a check
    assert all(isinstance(c.moment, Moment) for c in checks)
    # A rejecting check says how to act on it: a diagnosis gives that hint.
    for check in checks:
        assert check.hint or check.name not in {"input_mutation", "reference_fallback", "inconsistent_when_timed"}


def test_a_device_asks_its_own_checks_beside_every_devices_and_the_gpu_asks_no_cpu_check():
    cpu, gpu = {c.name for c in Cpu().checks}, {c.name for c in Gpu().checks}
    assert {"hidden_library", "unsampled", "busy_machine"} <= cpu - gpu
    assert gpu < cpu


def test_a_new_check_is_found_from_its_module_alone(tmp_path, monkeypatch):
    """Adding a check touches its module (and its test): the registry finds it, asks it at its
    moment, and a diagnosis gives its hint."""
    package = tmp_path / "more_checks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "odd_trial.py").write_text(textwrap.dedent('''
        from harness.judge.checking import Check, Finding, Moment
        from harness.records import Status

        def look(seen):
            if seen.number % 2:
                return Finding("odd_trial", ["trial %d is odd" % seen.number], Status.rejected, "an odd trial")
            return None

        CHECKS = [Check("odd_trial", "odd_trial", Moment.trial, look, hint="be even")]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "more_checks", raising=False)
    found = checks_in("more_checks")
    assert [c.name for c in found] == ["odd_trial"]
    findings = look(found, Moment.trial, Trial(number=3, changed_inputs=[]))
    verdict = verdicts.of_findings(findings)
    assert verdict.status is Status.rejected and verdict.flags == ["odd_trial"] and verdict.error == "an odd trial"
    assert look(found, Moment.trials, Trials([], [], [])) == []  # another moment: not asked
    result = Result(run_id="r", problem="p", candidate="c", candidate_hash="h", status=Status.rejected,
                    flags=["odd_trial"], error="an odd trial")
    assert diagnose(result, "", found).hint == "be even"


def test_a_moments_checks_are_asked_in_their_order():
    asked = []

    def check(name: str, order: int) -> Check:
        return Check(name, name, Moment.shapes, lambda seen: asked.append(name), order=order)

    look([check("late", 20), check("early", 10), check("middle", 15)], Moment.shapes, Shapes("n=2", None, False))
    assert asked == ["early", "middle", "late"]


def test_the_first_deciding_finding_decides_with_every_finding_of_its_flag():
    """Annotations decide nothing; a skip yields to nothing before it but decides where it comes
    first; the evidence of the sources of one flag is merged, the first's one line kept."""
    note = Finding("threads_left_running")
    first = Finding("reference_fallback", ["calls aten::mm"], Status.rejected, "computes with PyTorch: calls aten::mm")
    skip = Finding(None, [], Status.skipped, "not judged")
    later = Finding("reference_fallback", ["library time", "calls aten::mm"], Status.rejected, "other line")
    assert verdicts.of_findings([note]) is None
    verdict = verdicts.of_findings([note, first, skip, later])
    assert verdict.status is Status.rejected and verdict.flags == ["reference_fallback"]
    assert verdict.error == first.error and verdict.evidence == ["calls aten::mm", "library time"]
    skipped = verdicts.of_findings([note, skip, later])
    assert skipped.status is Status.skipped and skipped.flags == [] and skipped.error == "not judged"


@pytest.mark.parametrize("strict", [False, True])
def test_a_check_that_flags_or_decides_by_the_run_keeps_its_flag(strict):
    shapes = [c for c in checking.common() if c.moment is Moment.shapes and c.flag == "shape_specialized"]
    findings = look(shapes, Moment.shapes, Shapes("n=3", "wrong output", strict))
    verdict = verdicts.of_findings(findings)
    assert findings[0].flag == "shape_specialized"
    assert (verdict is not None and verdict.status is Status.mismatch) if strict else verdict is None
