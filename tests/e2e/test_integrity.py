"""Candidates that cheat never score: one test candidate per threat that exists on CPU, each
either rejected or held to its honest speed. (GPU-only threats, side streams and device-kernel
fallbacks, are in tests/gpu/.)"""

import contextlib
import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness.cli import main
from harness.cpu.checks.busy_machine import BUSY_CORES
from harness.cpu import sampling
from harness.cpu.checks import hidden_library

from tests.support import DATA

EXPECTED = {
    "tiny_relu/fallback_plain.py": ("rejected", "reference_fallback"),
    "tiny_relu/fallback_try.py": ("rejected", "reference_fallback"),
    "tiny_relu/fallback_thread.py": ("rejected", "reference_fallback"),  # on a thread of its own
    "tiny_linear/fallback_equivalent.py": ("rejected", "reference_fallback"),
    "tiny_relu/input_mutation.py": ("rejected", "input_mutation"),
    "tiny_relu/mutates_timed_inputs.py": ("rejected", "input_mutation"),  # on checked timed calls only
    "tiny_relu/caching.py": ("mismatch", None),
    "tiny_relu/stale_output.py": ("mismatch", None),
    "tiny_relu/static_out.py": ("mismatch", None),  # one buffer returned every call: not a cheat, not right either
    "tiny_relu/phase_detection.py": ("rejected", "inconsistent_when_timed"),
    "tiny_relu/shape_specialized.py": ("ok", "shape_specialized"),
    "tiny_relu/threads.py": ("ok", "threads_left_running"),
    "tiny_relu/patched_clock.py": ("ok", None),
    "tiny_relu/honest_twin.py": ("ok", None),
    "tiny_relu/forged_timing.py": ("ok", "timing_disagrees"),
    "tiny_relu/forged_quick.py": ("ok", "timing_disagrees"),  # a call quicker than the bound's slack, timed in batches
    "tiny_relu/quick_twin.py": ("ok", None),
    "tiny_relu/slow_while_sized.py": ("ok", "timing_disagrees"),  # then quick: timed again in larger batches
    "tiny_relu/lean_forged.py": ("ok", "timing_disagrees"),  # a leaner timed command of its own, 1 ns reported
    "tiny_relu/cpp_twin.py": ("ok", None),
    "tiny_relu/work_after_calls.py": ("ok", "timing_disagrees"),  # its work after its clock, before its reply
    "tiny_relu/forged_channel.py": ("crash", None),
    "tiny_relu/silent_failure.py": ("crash", None),  # a bare {"ok": false}: a broken message, not a harness error
    "tiny_relu/zero_time.py": ("crash", None),  # a time of 0 ms: a broken message, not a zero median
    "tiny_relu/huge_view.py": ("mismatch", None),  # a 4 TB stride-0 view of the wrong shape, never read whole
    "tiny_relu/snoop.py": ("mismatch", None),
    "tiny_relu/seals_feed.py": ("load_error", None),  # its feed file's seals are final: never the run's end
    # timing: what the worker could once predict, choose or fake
    "tiny_relu/lazy_fixup.py": ("rejected", "inconsistent_when_timed"),
    "tiny_relu/roll_cache.py": ("ok", None),
    "tiny_mse/cached_scalar.py": ("ok", None),
    "tiny_mse/honest_mse.py": ("ok", None),
    "tiny_mse/cpp_divides.py": ("ok", None),  # its C++ sum divided with PyTorch: an operator on scalars
    "tiny_relu/profiler_aware.py": (None, None),  # rejected, or at the reference's own speed: see below
    "tiny_relu/watched_slow.py": ("rejected", "inconsistent_when_profiled"),
    "tiny_relu/watched_padded.py": (None, None),  # rejected, or at the reference's own speed: see below
    "tiny_relu/busy_once.py": ("ok", None),  # slow profiled calls get a second look
    "tiny_linear/matmul_as_conv.py": ("rejected", "reference_fallback"),
    "tiny_linear/hidden_addmm.py": ("rejected", "reference_fallback"),  # its operators hidden from the profiler
    "tiny_linear/record_off_linear.py": ("rejected", "reference_fallback"),  # recording off, from Python
    "tiny_relu/redispatch_relu.py": ("rejected", "reference_fallback"),  # no operator recorded, no code of its own
    "tiny_relu/decoy_redispatch.py": ("rejected", "reference_fallback"),  # the same, beside a decoy on two elements
    "tiny_linear/lib_tensordot.py": ("rejected", "reference_fallback"),  # a matmul under another name
    "tiny_relu/glue_ops.py": ("ok", None),
}


def run(candidates, tmp_path, *extra):
    """None of these candidates hangs; beside two busy loops one timed command of a slow one took
    over 30 s (2026-12-07), hence the 120 s each phase may take."""
    out = tmp_path / "out"
    assert main(["eval", str(candidates), "--problems", str(DATA / "problems"), "--out", str(out),
                 "--device", "cpu", "--timeout", "120", "--db", str(tmp_path / "h.db"),
                 "--build-dir", str(tmp_path / "build"), *extra]) == 0
    return {r["candidate"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    return run(DATA / "integrity", tmp_path_factory.mktemp("integrity"))


def test_every_trick_is_caught(judged):
    assert set(judged) == set(EXPECTED)
    assert {name: r["status"] for name, r in judged.items() if EXPECTED[name][0]} == \
        {name: s for name, (s, _) in EXPECTED.items() if s}
    for name, (_, flag) in EXPECTED.items():
        if flag:
            assert flag in judged[name]["flags"], (name, judged[name]["flags"])


def test_rejections_say_why_in_one_line(judged):
    assert "which the reference runs" in judged["tiny_relu/fallback_plain.py"]["error"]
    assert "calls aten::relu, which the reference runs" in judged["tiny_relu/fallback_plain.py"]["evidence"]
    assert "matrix multiply" in " ".join(judged["tiny_linear/fallback_equivalent.py"]["evidence"])
    assert "input(s) [0]" in judged["tiny_relu/input_mutation.py"]["error"]
    assert "timed call" in judged["tiny_relu/phase_detection.py"]["error"]
    assert any("harness's clock saw" in line for line in judged["tiny_relu/forged_timing.py"]["evidence"])
    assert any("batch_size=33" in line for line in judged["tiny_relu/shape_specialized.py"]["evidence"])
    assert "PermissionError" in judged["tiny_relu/seals_feed.py"]["error"]
    assert "on checked timed call" in judged["tiny_relu/mutates_timed_inputs.py"]["error"]
    assert "operator recording off (RecordFunctionGuard)" in judged["tiny_linear/hidden_addmm.py"]["error"]
    assert "in the same memory on different calls" in judged["tiny_relu/static_out.py"]["error"]
    assert "hidden from the profiler" in judged["tiny_relu/redispatch_relu.py"]["error"]
    assert "(_enable_record_function)" in judged["tiny_linear/record_off_linear.py"]["error"]


def flags_of(result: dict) -> list[str]:
    """Its flags but the one that says how busy the machine was while it was timed (`busy_machine`):
    the suite passes beside other load too."""
    return [flag for flag in result["flags"] if flag != "busy_machine"]


def timed_ms(result):
    """The time its speedup is for (what the harness's clock vouches for), free of which reference
    timing the speedup is against."""
    reference = result["reference_recalibrated_timing"] or result["reference_timing"]
    return reference["median_ms"] / result["speedup"]


def test_patched_clocks_and_background_load_do_not_change_the_numbers(judged):
    honest = timed_ms(judged["tiny_relu/honest_twin.py"])
    for name in ("tiny_relu/patched_clock.py", "tiny_relu/threads.py"):
        assert judged[name]["timing"]["median_ms"] >= 2.0
        assert 0.3 < honest / timed_ms(judged[name]) < 1.4, name  # no gain; a busy thread slows its own calls


def test_forged_timings_gain_nothing(judged):
    forged = judged["tiny_relu/forged_timing.py"]
    timing = forged["timing"]
    assert timing["median_ms"] * timing["calls_per_sample"] == pytest.approx(0.001)  # what it claimed, kept as evidence
    assert forged["speedup"] < 0.5  # what the harness's clock vouches for: a 5 ms call is slow


def test_a_forged_time_on_calls_quicker_than_the_slack_gains_nothing(judged):
    """A relu done honestly in microseconds, reported as 1 ns: more than the whole call fits in
    the slack of the parent's clock, so such calls are timed many to a command (29,604x before)."""
    twin, forged, dodger = (judged[f"tiny_relu/{name}.py"] for name in ("quick_twin", "forged_quick", "slow_while_sized"))
    assert twin["timing"]["calls_per_sample"] > 100 and forged["timing"]["calls_per_sample"] > 100
    # Slow while its batch was sized (a batch of one), quick after: its batches ran short of the
    # bound's length, so it was timed again in batches sized by its quick calls (or the cap).
    assert dodger["timing"]["calls_per_sample"] > 100
    for cheat in (forged, dodger):
        # Its honest speed, within noise and the batch's slack: on these memory-bound microsecond
        # calls a forger keeps up to about half a call (docs/threat-model.md, "Not closed"). Slower
        # gains it nothing, and microsecond calls are noisy here: the dodger came out at 1.67 times
        # its twin's 0.016 ms in a clean-clone CI run (2026-12-05), within 1.6 in the runs around it.
        assert 0.5 < timed_ms(cheat) / timed_ms(twin) < 2.0, (cheat["candidate"], timed_ms(cheat), timed_ms(twin))


def test_a_forged_time_below_the_reference_overhead_and_slack_is_not_believed(judged):
    """lean_forged.py trims the worker's own per-call work below the reference's and reports
    1 ns: with a batch's slack larger than its whole call, only the rule that a report far below
    the clock is not believed (IMPLAUSIBLE_FACTOR) holds it to what the clock saw (10,266x
    before). What the clock saw is its leaner loop (no module call, no allocation): 0.8x to 2.3x
    the reference's speed on this microsecond relu; up to 4.2x while the harness's own per-call
    work (row views, output checks) was in the overhead subtracted from its wall time, which it
    skipped (docs/threat-model.md). Against the reference, not its C++ twin: in one CI-style run
    the twin's own process was three times slower than in others (0.027 ms a call reported,
    against 0.008 to 0.014). On a machine other processes kept busy (`busy_machine`) a microsecond
    kernel's speedup swings 0.9 to 3.2 times its idle figure (checks/busy_machine.py; the lean loop's
    came out 10.7x beside two busy loops, 2026-12-07): there the time is held to the clock's only."""
    lean = judged["tiny_relu/lean_forged.py"]
    assert lean["timing"]["calls_per_sample"] > 100
    assert "timing_disagrees" in lean["flags"] and timed_ms(lean) > 1e-3, (timed_ms(lean), lean["evidence"])  # not its 1 ns
    if "busy_machine" not in lean["flags"]:
        assert lean["speedup"] < 4, (lean["speedup"], lean["evidence"])


def test_work_done_after_the_calls_inside_the_timed_command_counts(judged):
    """work_after_calls.py computes its outputs after its own clock stopped, where the worker says
    where they are: the parent's clock sees it, and no allowance of the reference's covers it (an
    outputs' commit there once did: 35x to 126x its twin's speed). Its speed is its work's: within
    the spread of two quick kernels timed minutes apart (0.53 of its twin's time once, 2026-12-07,
    the twin timed slow that run: 0.035 ms against 0.024 in others)."""
    after = judged["tiny_relu/work_after_calls.py"]
    assert "timing_disagrees" in after["flags"], after["evidence"]
    assert timed_ms(after) >= 0.4 * timed_ms(judged["tiny_relu/quick_twin.py"]), (timed_ms(after), after["evidence"])


def test_honest_candidates_carry_no_flags(judged):
    """No flag but the one that says what they are: Python composing PyTorch operators."""
    for name in ("tiny_relu/honest_twin.py", "tiny_relu/quick_twin.py", "tiny_relu/glue_ops.py", "tiny_mse/honest_mse.py",
                 "tiny_relu/roll_cache.py",
                 "tiny_relu/busy_once.py"):
        assert flags_of(judged[name]) == ["no_custom_kernel"], (name, judged[name]["flags"], judged[name]["evidence"])
    assert flags_of(judged["tiny_relu/cpp_twin.py"]) == []  # its own C++ kernel


def test_caches_of_predictable_inputs_gain_nothing(judged):
    """Fresh input values on every timed call: a cache keyed by a roll of an earlier input, or by
    a roll-invariant signature, never hits; each cheat runs at its honest speed."""
    for cheat, honest in (("tiny_relu/roll_cache.py", "tiny_relu/honest_twin.py"),
                          ("tiny_mse/cached_scalar.py", "tiny_mse/honest_mse.py")):
        assert judged[cheat]["timing"]["median_ms"] >= 2.0, cheat  # it did the work on every call
        assert 0.6 < timed_ms(judged[honest]) / timed_ms(judged[cheat]) < 1.6, cheat


def test_a_candidate_that_tells_the_profiler_apart_gains_nothing(judged):
    """Watched, it runs its own arithmetic; unwatched, the reference's operator. Caught when its
    watched path is slower than the profiler explains; otherwise it runs at the reference's own
    speed: calling the reference cannot beat it (docs/threat-model.md). Its speedup is against the
    reference timed again just before it when the machine has surely drifted faster since (a 25
    µs operator timed minutes apart: 1.62x once against the first timing)."""
    aware = judged["tiny_relu/profiler_aware.py"]
    assert aware["status"] == "rejected" or aware["speedup"] < 1.6, (aware["status"], aware["speedup"])
    assert judged["tiny_relu/watched_slow.py"]["status"] == "rejected"
    # Its watched path padded with 62 trivial operators, each buying the profiler's cost on the
    # reference as room (what launch-bound honest candidates need): not caught, but unwatched it
    # runs the reference's own operator, which cannot beat it.
    padded = judged["tiny_relu/watched_padded.py"]
    assert padded["status"] == "rejected" or padded["speedup"] < 1.6, (padded["status"], padded["speedup"])
    assert "reference_fallback" in judged["tiny_linear/matmul_as_conv.py"]["flags"]
    assert "library convolution" in " ".join(judged["tiny_linear/matmul_as_conv.py"]["evidence"])


def test_every_timing_says_how_many_calls_and_why_it_stopped(judged):
    timing = judged["tiny_relu/honest_twin.py"]["timing"]
    assert timing["n"] >= 5 and timing["stopped"] in ("converged", "time_budget", "max_trials")
    assert timing["ci_low_ms"] <= timing["median_ms"] <= timing["ci_high_ms"]


def test_strict_shapes_turns_the_flag_into_a_mismatch(tmp_path):
    folder = tmp_path / "c" / "tiny_relu"  # that candidate alone
    folder.mkdir(parents=True)
    (folder / "shape_specialized.py").write_text((DATA / "integrity" / "tiny_relu" / "shape_specialized.py").read_text())
    specialised = run(tmp_path / "c", tmp_path, "--strict-shapes")["tiny_relu/shape_specialized.py"]
    assert specialised["status"] == "mismatch" and "benchmark's shape only" in specialised["error"]


def write(root, problem, name, body):
    import textwrap
    path = root / problem / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))


def test_inputs_changed_as_the_reference_changes_them_are_no_mutation(tmp_path):
    """A reference whose forward writes into its input: a candidate that does the same, on the
    correctness trials and on the timed calls, is judged on its speed, not rejected."""
    write(tmp_path / "problems", "", "inplace_relu.py", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu_(x)
        def get_inputs():
            return [torch.randn(64, 256)]
        def get_init_inputs():
            return []
        """)
    write(tmp_path / "c", "inplace_relu", "same_in_place.py", """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                return x.clamp_(min=0.0)
        """)
    assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--trials", "20", "--db", str(tmp_path / "h.db"),
                 "--build-dir", str(tmp_path / "build")]) == 0
    result = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert result["status"] == "ok", result["error"]


def test_output_memory_made_ready_off_the_clock_gains_nothing(tmp_path):
    """A 32 MB relu: one candidate returns buffers a thread of its own zeroed between calls (the
    faults and zeroing a fresh output costs, done off the clock), the other fresh outputs. A
    freed output's memory serves the next call's in every evaluation worker, so both cost the
    same (the pool had scored 1.1x to 1.4x against the honest 0.33x to 0.83x, 2026-12-04). Two
    honest ones, the pool held to the faster: on CI one honest worker's median came out 1.5 times
    the pool's on an idle-looking host (6.78 ms against 4.42, 2026-12-08)."""
    write(tmp_path / "problems", "", "mid_relu.py", """
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, x):
                return torch.relu(x)
        def get_inputs():
            return [torch.randn(2048, 4096)]
        def get_init_inputs():
            return []
        """)
    write(tmp_path / "c", "mid_relu", "fresh.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.clamp(x, min=0.0)
        """)
    write(tmp_path / "c", "mid_relu", "fresh_again.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):  # fresh.py's kernel, judged in a worker of its own
                return torch.clamp(x, min=0.0)
        """)
    write(tmp_path / "c", "mid_relu", "ready_pool.py", """
        import threading, time
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.shape, self.pool, self.last, self.lock = None, [], 0.0, threading.Lock()
                threading.Thread(target=self.refill, daemon=True).start()
            def refill(self):
                while True:
                    time.sleep(0.002)
                    if self.shape is None or time.monotonic() - self.last < 0.004 or len(self.pool) >= 4:
                        continue
                    ready = torch.empty(self.shape).zero_()
                    with self.lock:
                        self.pool.append(ready)
            def forward(self, x):
                self.shape = x.shape
                with self.lock:
                    out = self.pool.pop() if self.pool else torch.empty_like(x)
                result = torch.clamp(x, min=0.0, out=out)
                self.last = time.monotonic()
                return result
        """)
    assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "build")]) == 0
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert {name: r["status"] for name, r in results.items()} == {
        "mid_relu/fresh.py": "ok", "mid_relu/fresh_again.py": "ok", "mid_relu/ready_pool.py": "ok"}
    fresh = min(timed_ms(results["mid_relu/fresh.py"]), timed_ms(results["mid_relu/fresh_again.py"]))
    ready = timed_ms(results["mid_relu/ready_pool.py"])
    if any("busy_machine" in result["flags"] for result in results.values()):
        # Beside other load two workers' medians drift apart by more than the gain looked for here
        # (the pool at 0.35 of the fresh one's, beside two busy loops, 2026-12-07): there the
        # harness promises the flag, not the numbers.
        return
    assert ready >= 0.7 * fresh, (ready, fresh)  # noise between two workers: 0.80 to 1.2 seen; the pool had 0.3 to 0.58


def test_side_effects_change_nothing_recorded(tmp_path):
    """Without a sandbox (--sandbox off): rewriting the problem file, writing to the results
    database, and leaving an escaped process behind change no other candidate's verdict, and the
    writer is caught. (Under the sandbox none of these writes is possible: test_sandbox.py.)"""
    import shutil
    import sqlite3
    import time as clock

    problems = tmp_path / "problems"
    shutil.copytree(DATA / "problems", problems)
    pid_file, db = tmp_path / "escaped.pid", tmp_path / "h.db"
    cands = tmp_path / "c"
    write(cands, "tiny_relu", "a_rewrites_problem.py", f"""
        import torch.nn as nn
        open({str(problems / 'tiny_relu.py')!r}, "a").write("\\nclass Model(Model):\\n    def forward(self, x):\\n        return x * 0\\n")
        class ModelNew(nn.Module):
            def forward(self, x):
                return x * 0
        """)
    write(cands, "tiny_relu", "b_honest.py", """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                return (x + x.abs()) * 0.5
        """)
    write(cands, "tiny_relu", "c_writes_results.py", f"""
        import sqlite3
        import torch.nn as nn
        with sqlite3.connect({str(db)!r}) as conn:
            conn.execute("UPDATE results SET status = 'ok'")
        class ModelNew(nn.Module):
            def forward(self, x):
                return (x + x.abs()) * 0.5
        """)
    write(cands, "tiny_relu", "d_escapes.py", f"""
        import subprocess
        import torch.nn as nn
        child = subprocess.Popen(["setsid", "sleep", "300"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(child.pid))
        class ModelNew(nn.Module):
            def forward(self, x):
                return (x + x.abs()) * 0.5
        """)
    assert main(["eval", str(cands), "--problems", str(problems), "--out", str(tmp_path / "out"), "--device", "cpu",
                 "--trials", "5", "--db", str(db), "--build-dir", str(tmp_path / "build"), "--sandbox", "off"]) == 0
    with sqlite3.connect(db) as conn:
        status = dict(conn.execute("SELECT candidate, status FROM results"))
    assert status["tiny_relu/a_rewrites_problem.py"] == "mismatch"  # the reference it was judged by is the original
    assert status["tiny_relu/b_honest.py"] == "ok"
    assert status["tiny_relu/c_writes_results.py"] == "rejected"
    assert status["tiny_relu/d_escapes.py"] == "ok"
    clock.sleep(0.5)
    pid = int(pid_file.read_text())
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z")  # the escaped process was found and killed


def test_a_precision_downcast_fails_the_fp32_tolerance_and_shows_the_error_size(tmp_path):
    write(tmp_path / "c", "tiny_relu", "bf16_inside.py", """
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                h = x.bfloat16()
                return ((h + h.abs()) * 0.5).float()
        """)
    out = tmp_path / "out"
    assert main(["eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"), "--out", str(out), "--device", "cpu",
                 "--trials", "3", "--db", str(tmp_path / "h.db")]) == 0
    (result,) = map(json.loads, (out / "results.jsonl").read_text().splitlines())
    assert result["status"] == "mismatch" and result["max_abs_err"] > 1e-3


@contextlib.contextmanager
def busy_loops(count: int) -> Iterator[None]:
    """`count` processes outside the run, each keeping a core busy (for ten minutes at most)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 600\nwhile time.time() < end: pass"])
            for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_honest_kernels_get_no_flag_when_both_cores_are_busy(tmp_path):
    """Two busy loops beside the run (this machine has two cores): the wall-clock bound must leave
    honest candidates alone, and each result says the machine was busy (`busy_machine`)."""
    with busy_loops(2):
        folder = tmp_path / "c" / "tiny_relu"
        folder.mkdir(parents=True)
        for name in ("honest_twin.py", "glue_ops.py", "patched_clock.py"):
            (folder / name).write_text((DATA / "integrity" / "tiny_relu" / name).read_text())
        out = tmp_path / "out"
        assert main(["eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"), "--out", str(out),
                     "--device", "cpu", "--db", str(tmp_path / "h.db")]) == 0
    for result in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        # No flag on the kernel; the machine's being busy is said, with how busy.
        assert result["status"] == "ok" and sorted(result["flags"]) == ["busy_machine", "no_custom_kernel"], \
            (result["candidate"], result["flags"], result["evidence"])
        assert (result["timing"]["others_cores"] or 0.0) >= BUSY_CORES, result["timing"]


def test_a_slow_honest_kernel_is_judged_beside_two_busy_loops(tmp_path):
    """A naive C++ matmul, about 50 times slower than the reference's: its calls show a few stray
    library samples (allocation, the thread pool's bookkeeping) that the reference's quick calls
    share among many. Beside two busy loops one showed 0.43 ms a call against the 0.17 ms the
    hidden-library rule convicted at, spared only by too few calls to tell (2026-12-07): neither
    rejected nor left unjudged, it is `ok` with the busy machine said."""
    write(tmp_path / "problems", "", "mm128.py", matmul_problem(128))
    write(tmp_path / "c", "mm128", "naive.py", r'''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        _own = load_inline(name="naive_mm_ext", cpp_sources=r"""
        #include <torch/extension.h>
''' + NAIVE_MATMUL + r'''        """, functions=["matmul"])
        class ModelNew(nn.Module):
            def forward(self, a, b):
                return _own.matmul(a, b)
        ''')
    with busy_loops(2):
        assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                     "--device", "cpu", "--db", str(tmp_path / "h.db")]) == 0
    naive = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    assert naive["status"] == "ok" and "busy_machine" in naive["flags"], \
        (naive["status"], naive["error"], naive["flags"], library_figures(naive))


def test_a_ring_of_outputs_whose_constant_part_was_written_once_is_caught(tmp_path):
    """A padded relu, fifteen sixteenths zeros: a candidate that keeps more outputs than a command
    has calls (a command's outputs are 128 MB at most: 32 of these), zeroed once at load, and writes only the relu's part each call, returns garbage
    where the parent spoiled an earlier call's outputs (a red team's scored 4.1x against an honest
    kernel's 1.0x before, 2026-12-04). One that writes its outputs whole is `ok`."""
    write(tmp_path / "problems", "", "pad_relu.py", """
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        class Model(nn.Module):
            def forward(self, x):
                return F.pad(torch.relu(x), (0, 15 * x.shape[1]))
        def get_inputs():
            return [torch.randn(256, 256)]
        def get_init_inputs():
            return []
        """)
    write(tmp_path / "c", "pad_relu", "whole.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.zeros(x.shape[0], 16 * x.shape[1])
                torch.clamp(x, min=0.0, out=out[:, :x.shape[1]])
                return out
        """)
    write(tmp_path / "c", "pad_relu", "ring.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.ring, self.next = [torch.zeros(256, 16 * 256) for _ in range(40)], 0
            def forward(self, x):
                out, self.next = self.ring[self.next], (self.next + 1) % len(self.ring)
                torch.clamp(x, min=0.0, out=out[:, :x.shape[1]])
                return out
        """)
    assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "build")]) == 0
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert results["pad_relu/whole.py"]["status"] == "ok", results["pad_relu/whole.py"]["error"]
    ring = results["pad_relu/ring.py"]
    assert ring["status"] in ("mismatch", "rejected"), (ring["status"], ring.get("speedup"))


# A softmax whose reference spends about 0.25 ms a call in PyTorch's compute code on the 2-core VM:
# enough for the hidden-library rule to convict.
MID_SOFTMAX = """
    import torch
    import torch.nn as nn
    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=1)
    def get_inputs():
        return [torch.randn(256, 2048)]
    def get_init_inputs():
        return []
    """


def matmul_problem(size: int) -> str:
    """A reference matmul of two size x size matrices."""
    return f"""
        import torch
        import torch.nn as nn
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)
        def get_inputs():
            return [torch.randn({size}, {size}), torch.randn({size}, {size})]
        def get_init_inputs():
            return []
        """


# A naive C++ matmul of its own (cpp_sources), allocating its output with torch::zeros.
NAIVE_MATMUL = """        torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
            a = a.contiguous();
            b = b.contiguous();
            int64_t n = a.size(0), k = a.size(1), m = b.size(1);
            auto c = torch::zeros({n, m}, a.options());
            const float* x = a.data_ptr<float>();
            const float* y = b.data_ptr<float>();
            float* z = c.data_ptr<float>();
            for (int64_t i = 0; i < n; ++i)
                for (int64_t p = 0; p < k; ++p)
                    for (int64_t j = 0; j < m; ++j) z[i * m + j] += x[i * k + p] * y[p * m + j];
            return c;
        }
"""


def library_figures(result: dict) -> dict:
    """A result's library CPU time a call, sampled closely and sparsely, and the reference's."""
    return {field: result[field] for field in ("library_cpu_ms_per_call", "reference_library_cpu_ms_per_call",
                                               "sparse_library_cpu_ms_per_call", "reference_sparse_library_cpu_ms_per_call")}


def noop_beside_hidden(threads: int = 0) -> str:
    """Code of its own that does nothing (`int noop()`), beside the reference's softmax
    redispatched below the call the profiler records, through a name built at run time; with
    `threads` idle threads started at import."""
    return f"""
        import threading
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        _noop = load_inline(name="noop_ext", cpp_sources="int noop() {{ return 0; }}", functions=["noop"])
        _call = getattr(torch.ops.aten._softmax.default, "re" + "dispatch")
        _keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        _idle = threading.Event()
        for _ in range({threads}):
            threading.Thread(target=_idle.wait, daemon=True).start()
        class ModelNew(nn.Module):
            def forward(self, x):
                _noop.noop()
                return _call(_keys, x, 1, False)
        """


def test_an_extension_that_computes_nothing_beside_library_work_hidden_from_the_profiler_is_caught(tmp_path):
    """Code of its own that does nothing (`int noop()`), beside the reference's softmax
    redispatched below the call the profiler records, through a name built at run time: no
    operator recorded, and its own code counts its time. Sampled from outside, its threads run
    PyTorch's compute code as long as the reference's do (a red team's had passed at 0.59x to
    0.85x against an honest C++ softmax's 0.08x, 2026-12-04). A softmax composed of PyTorch
    operators the profiler records is judged by the fallback rules, and passes (with no kernel of
    its own)."""
    write(tmp_path / "problems", "", "mid_softmax.py", MID_SOFTMAX)
    write(tmp_path / "c", "mid_softmax", "noop_beside_hidden.py", noop_beside_hidden())
    write(tmp_path / "c", "mid_softmax", "composed.py", """
        import torch
        import torch.nn as nn
        class ModelNew(nn.Module):
            def forward(self, x):
                e = torch.exp(x - x.amax(dim=1, keepdim=True))
                return e / e.sum(dim=1, keepdim=True)
        """)
    assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "build")]) == 0
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    composed, hidden = results["mid_softmax/composed.py"], results["mid_softmax/noop_beside_hidden.py"]
    assert composed["status"] == "ok" and flags_of(composed) == ["no_custom_kernel"], (composed["status"], composed["error"])
    if (refusal := sampling.refused()) is not None:
        pytest.skip(f"this host does not let the harness sample a worker: {refusal}")
    sampled = {name: (r["library_cpu_ms_per_call"], r["reference_library_cpu_ms_per_call"]) for name, r in results.items()}
    assert hidden["status"] == "rejected" and flags_of(hidden) == ["reference_fallback"], (hidden["status"], hidden["error"], sampled)
    assert "no recorded operator explains" in hidden["error"]
    assert all(own is not None and reference is not None for own, reference in sampled.values()), sampled


def test_library_work_hidden_from_the_profiler_is_caught_beside_a_busy_loop(tmp_path):
    """A busy loop outside the run keeps one of the softmax's two threads off its core, and the
    other spins in OpenMP's runtime waiting for it: 52% to 94% of the samples. Counting those as
    work, sampling had stopped with 33 to 53 of the reference's samples in library code, too few
    for the rule, and the `noop` passed `ok` in six runs of seven (the project's CI passed it once
    too, with 600 threads beside it, at 0.4 ms a call of library time, 2026-12-05: likely so)."""
    write(tmp_path / "problems", "", "mid_softmax.py", MID_SOFTMAX)
    write(tmp_path / "c", "mid_softmax", "noop_beside_hidden.py", noop_beside_hidden())
    if (refusal := sampling.refused()) is not None:
        pytest.skip(f"this host does not let the harness sample a worker: {refusal}")
    with busy_loops(1):
        assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                     "--device", "cpu", "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "build")]) == 0
    hidden = json.loads((tmp_path / "out" / "results.jsonl").read_text())
    sampled = library_figures(hidden)
    assert hidden["status"] == "rejected" and "no recorded operator explains" in hidden["error"], \
        (hidden["status"], hidden["error"], hidden["flags"], sampled)


def test_a_candidate_that_starts_threads_past_the_limit_on_open_files_is_sampled_or_not_judged(tmp_path):
    """The sampler opens an event for each of the worker's threads on each CPU. The `noop`
    extension above, beside 600 idle threads, got its sampling refused behind the usual soft limit
    of 1,024 open files on two CPUs and passed `ok` at 0.72x (2026-12-05). The harness now raises
    its soft limit to the hard one; where the hard one is too low still, the candidate is not
    judged, since the reference's sampling would have convicted it."""
    cpus = os.cpu_count() or 1
    limit, threads = 512 * cpus, 600  # the reference's threads fit (a few beside one a CPU), these do not
    write(tmp_path / "problems", "", "mid_softmax.py", MID_SOFTMAX)
    write(tmp_path / "c", "mid_softmax", "noop_many_threads.py", noop_beside_hidden(threads))
    if (refusal := sampling.refused()) is not None:
        pytest.skip(f"this host does not let the harness sample a worker: {refusal}")

    def judged(soft: int, hard: int, out: str) -> dict:
        subprocess.run([sys.executable, "-m", "harness", "eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"),
                        "--out", str(tmp_path / out), "--device", "cpu", "--db", str(tmp_path / "h.db"),
                        "--build-dir", str(tmp_path / "build")], check=True, stdout=subprocess.DEVNULL,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
        return json.loads((tmp_path / out / "results.jsonl").read_text())

    untold = judged(limit, limit, "out_hard")
    assert untold["status"] == "skipped" and "could not be sampled" in untold["error"], (untold["status"], untold["error"])
    assert "too many open files: " in untold["error"] and f"may open {limit} files" in untold["error"]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2 * (threads + 8) * cpus + sampling.RESERVED_FILES + 256:
        pytest.skip(f"the hard limit on open files here ({hard}) is too low for the candidate's threads to be sampled")
    caught = judged(limit, hard, "out_soft")
    sampled = library_figures(caught)
    assert caught["status"] == "rejected" and "no recorded operator explains" in caught["error"], \
        (caught["status"], caught["error"], caught["speedup"], caught["flags"], sampled)


def test_a_candidate_that_does_its_own_work_only_while_sampled_closely_is_caught(tmp_path):
    """Closely sampled calls run slower (a sample costs about 18 us on the 2-core VM), which a
    probe timed before each call tells apart: there it runs a matmul of its own, elsewhere the
    reference's, redispatched below the profiler (`ok` at 0.38x for a softmax with only close
    sampling, 2026-12-05). Every other call is sampled sparsely, too rarely for the probe to
    notice, and the timing goes on until those calls can tell the library time."""
    write(tmp_path / "problems", "", "small_matmul.py", matmul_problem(192))
    write(tmp_path / "c", "small_matmul", "own_work_when_watched.py", r'''
        import torch
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline
        _own = load_inline(name="own_matmul_ext", cpp_sources=r"""
        #include <torch/extension.h>
        #include <chrono>
        double probe() {  // seconds a fixed loop takes: longer where interrupts (samples) land
            auto began = std::chrono::steady_clock::now();
            volatile int64_t total = 0;
            for (int64_t i = 0; i < 300000; ++i) total = total + i;
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
        }
''' + NAIVE_MATMUL + r'''        """, functions=["probe", "matmul"])
        _call = getattr(torch.ops.aten.mm.default, "re" + "dispatch")
        _keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
        _probes = []

        def _watched():
            """Whether this call is sampled closely: its probe and the last call's slower than most
            so far (a busy moment slows one now and then; sampling, every call of a command)."""
            _probes.append(_own.probe())
            usual = sorted(_probes[-200:])[len(_probes[-200:]) // 2]
            return len(_probes) > 20 and min(_probes[-2:]) > 1.15 * usual

        class ModelNew(nn.Module):
            def forward(self, a, b):
                return _own.matmul(a, b) if _watched() else _call(_keys, a, b)
        ''')
    assert main(["eval", str(tmp_path / "c"), "--problems", str(tmp_path / "problems"), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--db", str(tmp_path / "h.db"), "--build-dir", str(tmp_path / "build")]) == 0
    found = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    if (refusal := sampling.refused()) is not None:
        pytest.skip(f"this host does not let the harness sample a worker: {refusal}")
    sampled = library_figures(found)
    if found["status"] == "skipped":  # a host too busy for the calls that would tell it: not judged, never passed
        assert "too few to tell it from none" in found["error"], (found["error"], sampled)
        return
    own_work_mostly = sampled["sparse_library_cpu_ms_per_call"] < hidden_library.CALL_SHARE * found["timing"]["median_ms"]
    if found["status"] == "ok" and (own_work_mostly or
                                    sampled["sparse_library_cpu_ms_per_call"] < 1.5 * sampled["library_cpu_ms_per_call"]):
        # Beside two busy loops its probe took busy moments for close sampling, and close sampling
        # for busy moments, in every kind of call alike (library time sampled closely 0.154 ms a
        # call, sparsely 0.111, the reference's 0.35 and 0.37; 2026-12-07): it no longer told them
        # apart, and did its own work in most of its calls. What is left is library work in a
        # minority of calls, below HIDDEN_LIBRARY_SHARE of the reference's, or below CALL_SHARE of
        # its own call (0.54 ms a call of 11.5, at 0.036x, beside a busy loop on a loaded host):
        # not convicted by design, and no gain.
        pytest.skip(f"the host was too busy for the candidate's probe to tell close sampling apart: {sampled}")
    # Caught either way: its closely sampled calls hide the library (`reference_fallback`), or its
    # profiled calls, watched closely too, run slower than its timed ones (`inconsistent_when_profiled`:
    # 5.7 ms a profiled call against fewer timed, on CI, 2026-12-08).
    caught_by = {"reference_fallback": "no recorded operator explains",
                 "inconsistent_when_profiled": "behaves differently when profiled"}
    assert found["status"] == "rejected" and len(flags_of(found)) == 1 and flags_of(found)[0] in caught_by, (
        found["status"], found["error"], sampled)
    assert caught_by[flags_of(found)[0]] in found["error"]
