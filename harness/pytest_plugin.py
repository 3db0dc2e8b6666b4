"""The pytest plugin (entry point `pytest11`, so any project with `harness` installed has it).

`pytest --harness-problems DIR`: one test per problem file, failing with the one-line reason
`harness check` gives (it cannot be loaded, raises, gives NaN or differing outputs for the same
inputs, ignores its inputs, or an all-zeros or constant answer passes at its tolerance).
`pytest --harness-candidates DIR`: one test per candidate, judged through an api.Evaluator (the
`harness eval` pipeline: builds ahead, sandbox, store); ok passes, skipped skips, any other verdict
fails with its reason and the diagnosis's hint. Given either option and no paths, pytest collects
nothing else. Nothing here imports torch until a test runs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from . import NUMPY_NOISE

HARNESS_STATE = pytest.StashKey["HarnessState"]()


class HarnessFailure(Exception):
    """A problem or candidate that fails: its message is the whole report."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "KernelBench-format problems and candidates (the harness plugin)")
    group.addoption("--harness-problems", metavar="DIR", default=None,
                    help="one test per problem file in DIR (KernelBench levelN folders too); with "
                         "--harness-candidates, only where their problems are (default: problems)")
    group.addoption("--harness-candidates", metavar="DIR", default=None,
                    help="one test per candidate in DIR: passes on ok, skips on skipped, else fails with the reason")
    group.addoption("--harness-full-size", action="store_true", help="check problems at their own input sizes")
    group.addoption("--harness-device", choices=["cpu", "cuda"], default=None, help="(default: cuda when available)")
    group.addoption("--harness-db", metavar="FILE", default="reports/harness.db",
                    help="where candidates' results are stored, as a run (default: reports/harness.db)")
    group.addoption("--harness-build-dir", metavar="DIR", default=None, help="build cache (default: the user's)")
    group.addoption("--harness-timeout", type=float, default=300.0, help="seconds allowed per phase of a candidate")
    group.addoption("--harness-trials", default="auto", metavar="auto|N", help="timed calls per model")
    group.addoption("--harness-sandbox", choices=["auto", "strict", "off"], default="auto")
    group.addoption("--harness-min-speedup", type=float, default=None, metavar="X",
                    help="a correct candidate slower than X times the reference fails too (default: correct passes)")


def _requested(config: pytest.Config) -> bool:
    return bool(config.getoption("harness_problems") or config.getoption("harness_candidates"))


def pytest_configure(config: pytest.Config) -> None:
    if _requested(config):
        config.stash[HARNESS_STATE] = HarnessState(config)
        # pytest resets warning filters per test, so harness/__init__'s own filter does not hold here.
        config.addinivalue_line("filterwarnings", f"ignore:{NUMPY_NOISE}:UserWarning")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Only the harness's tests, unless test paths were named as well."""
    if _requested(config) and config.args_source is not pytest.Config.ArgsSource.ARGS:
        return True
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if HARNESS_STATE in config.stash:
        items.extend(config.stash[HARNESS_STATE].items(session))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(HARNESS_STATE, None)
    if state is not None and state.evaluator is not None and state.evaluator.run_id:
        terminalreporter.write_line(f"harness: candidates' results stored in {state.db} as run {state.evaluator.run_id}")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(HARNESS_STATE, None)
    if state is not None:
        state.close()


class HarnessState:
    """One pytest session's harness: the options, and (once a test needs them) the problem
    checker and the Evaluator that judges every collected candidate."""

    def __init__(self, config: pytest.Config):
        here = config.invocation_params.dir
        option = config.getoption
        self.problems_dir = here / (option("harness_problems") or "problems")
        self.candidates_dir = here / option("harness_candidates") if option("harness_candidates") else None
        self.db = here / option("harness_db")
        self.build_dir = here / option("harness_build_dir") if option("harness_build_dir") else None
        self.device, self.sandbox_mode = option("harness_device"), option("harness_sandbox")
        self.shrink = not option("harness_full_size")
        trials = option("harness_trials")
        self.trials = None if trials == "auto" else int(trials)
        self.timeout_s = option("harness_timeout")
        self.evaluator = None
        self._checker = None
        self._futures: dict = {}

    def items(self, session: pytest.Session) -> list[pytest.Item]:
        from .errors import UsageError
        from .inputs.discovery import discover
        from .inputs.problems import ProblemError, discover_problem_files

        try:
            if self.candidates_dir is None:
                problems, unusable = discover_problem_files(self.problems_dir)
                found = [(Path(p.path), p, None) for p in problems]
                found += [(self._problem_file(stem), None, why) for stem, why in unusable.items()]
                return [ProblemItem.from_parent(HarnessFile.from_parent(session, path=path), name="check",
                                                problem=problem, unusable=why) for path, problem, why in sorted(found)]
            candidates = discover(self.problems_dir, self.candidates_dir)[1]
        except (ProblemError, UsageError) as exc:
            raise pytest.UsageError(f"harness: {exc}") from None
        return [CandidateItem.from_parent(HarnessFile.from_parent(session, path=Path(c.path)), name="verdict",
                                          candidate=c) for c in candidates]

    def _problem_file(self, stem: str) -> Path:
        """Where an unusable problem file is: in the problems dir or one of its levelN folders."""
        return next(iter([*self.problems_dir.glob(f"{stem}.py"), *self.problems_dir.glob(f"level*/{stem}.py")]),
                    self.problems_dir / f"{stem}.py")

    def check(self, problem):
        from .problem_check import check_problem, check_setup

        if self._checker is None:
            with _stops_the_session():
                config, host, sandbox = self._settings()
            self._checker = (config, *check_setup(config, host, sandbox))
        config, cache, placement = self._checker
        return check_problem(problem, config, cache, placement, self.shrink)

    def _settings(self):
        from .records import EvalConfig, HostEnv, SandboxMode
        from .run import prepare_sandbox, resolve_device
        from .worker.sandbox import default_limits

        host = HostEnv.from_environ(os.environ, str(Path.home()))  # this edge reads the environment once
        return (EvalConfig(device=resolve_device(self.device)), host,
                prepare_sandbox(SandboxMode(self.sandbox_mode), default_limits()))

    def result(self, session: pytest.Session, candidate):
        """The candidate's Result. The first call submits every collected candidate, so builds
        run ahead of the test that waits."""
        from .api import Evaluator

        if self.evaluator is None:
            with _stops_the_session():
                self.evaluator = Evaluator(self.problems_dir, device=self.device, db=self.db, build_dir=self.build_dir,
                                           sandbox=self.sandbox_mode, trials=self.trials, timeout_s=self.timeout_s)
            for item in session.items:
                if isinstance(item, CandidateItem):
                    self._futures[item.candidate.rel_path] = self.evaluator.submit_candidate(item.candidate)
        return self._futures[candidate.rel_path].result()

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()


@contextlib.contextmanager
def _stops_the_session():
    """A setting the run cannot start with (a device torch does not see, a host that forbids
    reading workers' memory) ends the session in one line, not every test with a traceback."""
    from .errors import UsageError

    try:
        yield
    except UsageError as exc:
        pytest.exit(f"harness: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


class HarnessFile(pytest.File):
    """A problem or candidate file; its one test is made by the plugin, not collected."""

    def collect(self):
        return []


class HarnessItem(pytest.Item):
    @property
    def state(self) -> HarnessState:
        return self.config.stash[HARNESS_STATE]

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, HarnessFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)


class ProblemItem(HarnessItem):
    def __init__(self, *, problem, unusable: str | None, **kwargs):
        super().__init__(**kwargs)
        self.problem, self.unusable = problem, unusable

    def runtest(self) -> None:
        if self.unusable:
            raise HarnessFailure(self.unusable)
        finding = self.state.check(self.problem)
        if finding.flags:
            raise HarnessFailure(f"{', '.join(finding.flags)}: {finding.error or '; '.join(finding.notes)}")

    def reportinfo(self):
        return self.path, None, f"problem {self.path.stem}"


def too_slow(speedup: float | None, least: float | None) -> str | None:
    """Why a correct candidate fails for its speed (--harness-min-speedup): a 0.1x kernel had passed."""
    if least is None or speedup is None or speedup >= least:
        return None
    return f"ok, but {speedup:.3g}x the reference's speed, below --harness-min-speedup {least:g}"


class CandidateItem(HarnessItem):
    def __init__(self, *, candidate, **kwargs):
        super().__init__(**kwargs)
        self.candidate = candidate

    def runtest(self) -> None:
        from .records import Status

        result = self.state.result(self.session, self.candidate)
        self.user_properties.append(("status", result.status.value))
        if result.speedup is not None:
            self.user_properties.append(("speedup", f"{result.speedup:.3f}"))
        if result.status is Status.skipped:
            pytest.skip(result.error or "skipped")
        if result.status is not Status.ok:
            hint = f"\nhint: {result.diagnosis.hint}" if result.diagnosis and result.diagnosis.hint else ""
            raise HarnessFailure(f"{result.status.value}: {result.error}{hint}")
        if (slow := too_slow(result.speedup, self.config.getoption("harness_min_speedup"))) is not None:
            raise HarnessFailure(slow)

    def reportinfo(self):
        return self.path, None, f"candidate {self.candidate.rel_path}"
