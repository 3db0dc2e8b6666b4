"""Launchers started for real: a run's sandbox policy probed on this kernel, a booted worker
killed with its scratch removed once its parent is gone, and no worker started by a run that is
stopping."""

import os
import socket
import subprocess
import sys
import time

import pytest

from harness.records import SandboxMode
from harness.worker import confine, processes
from harness.worker.launch import BOOTSTRAP
from harness.worker.pace import RunGate, RunStopped
from harness.worker.parent import RUN_TOKEN_VAR, Placement, Worker, run_scratch
from harness.worker.sandbox import PACKAGE_DIR, SandboxUnavailable, confinement, decide_policy
from tests.unit.worker.test_sandbox import LIMITS, filters, gone


def test_strict_refuses_a_kernel_without_what_it_needs(monkeypatch):
    monkeypatch.setattr(confine, "landlock_abi", lambda: 4)
    with pytest.raises(SandboxUnavailable, match="Landlock ABI 6 or newer"):
        decide_policy(SandboxMode.strict, LIMITS)
    assert decide_policy(SandboxMode.auto, LIMITS).landlock_abi == 4


@pytest.mark.parametrize("mode, sees_gpu", [("auto", False), ("auto", True), ("off", False)],
                         ids=["own_pid_namespace", "host_pid_namespace", "no_sandbox"])
def test_a_launcher_whose_parent_is_gone_kills_its_worker_and_removes_its_scratch(tmp_path, mode, sees_gpu):
    """The parent's end of the lifeline closes however the parent goes (here: closed by hand, the
    parent being this test): the booted worker is killed, its scratch and run dirs removed."""
    policy = decide_policy(SandboxMode(mode), LIMITS)
    run_dir = tmp_path / "run"
    scratch = run_dir / "harness-worker-1"
    scratch.mkdir(parents=True)
    spec = scratch / "launch.json"
    rules = confinement(policy, scratch, sees_gpu=sees_gpu, env={"PATH": "/usr/bin"})
    spec.write_text(rules.model_copy(update={"run_dir": str(run_dir)}).model_dump_json())
    ours, theirs = socket.socketpair()  # ours stays open: the worker waits for a job, never for its end
    lifeline, held = os.pipe()
    launcher = subprocess.Popen([sys.executable, "-I", "-c", BOOTSTRAP, PACKAGE_DIR, str(spec), str(theirs.fileno()),
                                 "-1", "-1", str(lifeline)], pass_fds=[theirs.fileno(), lifeline], cwd=scratch,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    theirs.close()
    os.close(lifeline)
    try:
        deadline = time.monotonic() + 30
        while not processes.descendants(launcher.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.descendants(launcher.pid), "the launcher started no worker"
        worker = processes.descendants(launcher.pid)[0]
        # no userfaultfd under every policy; keeping to itself is one more filter where the policy asks it
        expected = filters(launcher.pid) + 1 + rules.to_itself
        deadline = time.monotonic() + 10  # its confinement is done early in its boot
        while filters(worker) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert filters(worker) == expected
        os.close(held)
        launcher.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not gone(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(worker)
        assert not run_dir.exists()
    finally:
        processes.kill_tree(launcher.pid)  # if the launcher failed to
        launcher.wait()
        ours.close()


def test_a_worker_refused_by_a_closed_gate_keeps_nothing():
    """A stopping run's threads may still try to start workers: each is refused before it exists,
    and leaves no scratch dir (nor the run's) and no open file behind."""
    token = f"test-{os.getpid()}-{time.monotonic_ns()}"
    gate = RunGate()
    gate.close()
    open_before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RunStopped):
        Worker(Placement(env={RUN_TOKEN_VAR: token}), role="worker", device="cpu", timeout_s=5, pace=gate)
    assert not run_scratch(token).exists()
    assert len(os.listdir("/proc/self/fd")) == open_before
