"""The sandbox, end to end: one run of hostile candidates interleaved with honest ones, each attack
aimed at decoys inside this test's tmp_path (tests/data/hostile/README.md). Every attack gets a
verdict with a one-line reason, nothing outside the workers' scratch changes, the honest
candidates get what they get in a run without the attackers, and no process of the run is left."""

import fcntl
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from harness.worker import confine
from tests.support import DATA, REPO

HOSTILE = DATA / "hostile"
ATTACKS = sorted(p.stem for p in HOSTILE.glob("*.py"))
HONEST = "z_honest.py"
VICTIM = "a_victim.py"  # a built extension (C++ on a CPU run, CUDA on a GPU run) whose key dir an attack aims at
# nvcc and g++ on torch headers, two at a time in a CUDA build, hold about 3 GiB together
HOST_MEMORY = {"cpu": "3G", "cuda": "6G"}
LIMITS = ["--max-processes", "64", "--max-scratch", "256M", "--max-file-size", "64M"]
LIMIT_WORDS = {"memory_bomb": "host memory", "fork_bomb": "processes", "disk_fill": "scratch", "disk_fill_cache": "scratch",
               "stdout_flood": "file size limit", "huge_reply": "message over 64 MB"}
HONEST_RELU = '''

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5
'''
SECRET = "hunter2-" + uuid.uuid4().hex[:8]
# Big enough that a call takes milliseconds: speedups with and without the attackers can be compared.
PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


rows = 1024
cols = 4096


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""

pytestmark = pytest.mark.skipif(not confine.landlock_abi(), reason="needs a kernel with Landlock")


class Listener:
    """A TCP listener and a UDP socket on 127.0.0.1 that remember whether anyone connected or sent."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp_port = self.udp.getsockname()[1]
        self.connections = self.datagrams = 0
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self):
        while True:
            try:
                self.udp.recv(4096)
            except OSError:
                return
            self.datagrams += 1

    def _accept(self):
        while True:
            try:
                self.sock.accept()[0].close()
            except OSError:
                return
            self.connections += 1


def layout(tmp: Path) -> dict:
    paths = {name: tmp / name for name in ("home", "other", "pkg", "problems", "candidates", "build", "scratch", "run")}
    for path in paths.values():
        path.mkdir(parents=True)
    (paths["home"] / ".ssh").mkdir()
    (paths["home"] / ".ssh" / "id_rsa").write_text("-----BEGIN KEY-----\n")
    (paths["home"] / "notes.json").write_text('{"notes": []}')
    with sqlite3.connect(paths["other"] / "other_run.db") as other:  # another run's database, in a "/tmp"
        other.execute("CREATE TABLE results (candidate TEXT, status TEXT)")
        other.execute("INSERT INTO results VALUES ('x', 'ok')")
    (paths["other"] / "results.jsonl").write_text('{"status": "ok"}\n')
    (paths["other"] / "index.html").write_text("<html></html>")
    shutil.copytree(REPO / "harness", paths["pkg"] / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    (paths["problems"] / "relu_4m.py").write_text(PROBLEM)
    (paths["run"] / ".env").write_text("API_KEY=decoy-in-the-directory-the-harness-runs-in\n")
    return paths


def write_candidates(paths: dict, attacks: list[str], targets: dict, device: str) -> None:
    folder = paths["candidates"] / "relu_4m"
    folder.mkdir(exist_ok=True)
    header = f"T = {targets!r}\n\n"
    for attack in attacks:
        (folder / f"h_{attack}.py").write_text(header + (HOSTILE / f"{attack}.py").read_text() + HONEST_RELU)
    (folder / HONEST).write_text(HONEST_RELU)
    shutil.copy(HOSTILE / "victims" / ("cuda_relu.py" if device == "cuda" else "cpp_relu.py"), folder / VICTIM)


def digests(paths: dict) -> dict[str, str]:
    """Every file the candidates must not change (not the run's own output or build cache)."""
    found = {}
    for name in ("home", "other", "pkg", "problems", "candidates"):
        for path in sorted(paths[name].rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


# A host without user namespaces, as root: a container's usual lot. The harness runs in a user
# namespace of its own whose limit on further user namespaces is 0, mapped to this test's uid.
NO_USER_NAMESPACES = ["unshare", "--user", "--map-root-user", "sh", "-c",
                      'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh"]


# An ordinary user: uid 1000 holding no capability (a process whose uid is not 0 loses them at
# exec), in a user namespace of its own, which maps it to this test's uid: the test's files are its
# own as it sees them. Without user namespaces, the namespace above it allows no further one.
AS_ORDINARY_USER = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]
NO_USER_NAMESPACES_ORDINARY_USER = ["unshare", "--user", "--map-root-user", "sh", "-c",
                                    'echo 1 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
                                    *AS_ORDINARY_USER]
# The matrix of hosts the hostile run is tried on: each a command prefix.
HOSTS = {"user namespaces": [], "none, as root": NO_USER_NAMESPACES, "user namespaces, an ordinary user": AS_ORDINARY_USER,
         "none, an ordinary user": NO_USER_NAMESPACES_ORDINARY_USER}


def works_here(host: list[str]) -> bool:
    """Whether a host prefix runs on this machine (unshare(1), and user namespaces to begin with)."""
    try:
        return subprocess.run(host + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_harness(paths: dict, marker: str, db: Path, out: Path, device: str, *extra: str,
                host: list[str] | None = None) -> subprocess.CompletedProcess:
    """The harness from the package copy in tmp_path, as a caller would run it: its own HOME,
    TMPDIR and a secret in its environment, the directory it runs in on its import path (as
    `python -m harness` puts it); `marker` on its command line for the attackers; under `host`
    (a command prefix: NO_USER_NAMESPACES), where given."""
    code = (f"import os, sys; sys.path[:0] = [os.getcwd(), {str(paths['pkg'])!r}]; "
            "from harness.cli import main; sys.exit(main(sys.argv[2:]))")
    args = ["eval", str(paths["candidates"]), "--problems", str(paths["problems"]), "--device", device, "--trials", "20",
            "--correctness-trials", "2", "--timeout", "30", "--build-dir", str(paths["build"]), "--db", str(db),
            "--out", str(out), "--max-host-memory", HOST_MEMORY[device], *LIMITS, *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(HOME=str(paths["home"]), TMPDIR=str(paths["scratch"]), HARNESS_TEST_SECRET=SECRET)
    return subprocess.run([*(host or []), sys.executable, "-c", code, marker, *args], cwd=paths["run"], env=env,
                          capture_output=True, text=True, timeout=900)


def survivors(*needles: str) -> list[str]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(needle in cmdline for needle in needles) and proc.name != str(os.getpid()):
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def clear_immutable(paths: dict) -> None:
    for path in paths["run"].rglob("*"):
        try:
            with open(path, "rb") as target:
                fcntl.ioctl(target, 0x40086602, struct.pack("l", 0))
        except OSError:
            pass


def hostile_run(tmp: Path, device: str, host: list[str] | None = None):
    """Run the attackers beside the honest candidates (under `host`, a command prefix, where
    given); yields what the tests below look at."""
    paths = layout(tmp)
    listener = Listener()
    marker, daemon_marker = f"harness-test-{uuid.uuid4().hex}", f"harness-daemon-{uuid.uuid4().hex}"
    targets = {"tmp": str(tmp), "home": str(paths["home"]), "other": str(paths["other"]), "pkg": str(paths["pkg"]),
               "db": str(paths["run"] / "h.db"), "out": str(paths["run"] / "out"), "build": str(paths["build"]),
               "problems": str(paths["problems"]), "candidates": str(paths["candidates"]), "port": listener.port,
               "udp_port": listener.udp_port,
               "marker": marker, "daemon_marker": daemon_marker, "secret": SECRET, "run": str(paths["run"])}
    write_candidates(paths, ATTACKS, targets, device)
    before = digests(paths)
    try:
        done = run_harness(paths, marker, paths["run"] / "h.db", paths["run"] / "out", device, host=host)
        time.sleep(6)  # the daemon would act 4 s after its start
        results = {r["candidate"].split("/")[-1]: r for r in
                   map(json.loads, (paths["run"] / "out" / "results.jsonl").read_text().splitlines())}
        yield {"paths": paths, "done": done, "results": results, "before": before, "after": digests(paths),
               "listener": listener, "markers": (marker, daemon_marker, str(paths["pkg"])), "device": device,
               "host": host}
    finally:
        clear_immutable(paths)


@pytest.fixture(scope="module", params=list(HOSTS))
def hostile(request, tmp_path_factory):
    """The hostile run on each kind of host: with user namespaces and without them, as root and as
    an ordinary user."""
    host = HOSTS[request.param] or None
    if host is not None and not works_here(host):
        pytest.skip(f"cannot make a host of this kind here ({' '.join(host[:2])})")
    yield from hostile_run(tmp_path_factory.mktemp("hostile"), "cpu", host)


def test_the_run_completes_and_says_which_protections_were_active(hostile):
    done = hostile["done"]
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((hostile["paths"]["run"] / "out" / "run.json").read_text())
    assert {"landlock_filesystem", "watchdog", "resource_limits"} <= set(run["sandbox"]["active"])
    if hostile["host"] in (NO_USER_NAMESPACES, NO_USER_NAMESPACES_ORDINARY_USER):
        assert "user_namespace" not in run["sandbox"]["active"]
    elif hostile["host"] == AS_ORDINARY_USER:  # made in one: this host has them
        assert "user_namespace" in run["sandbox"]["active"]
    protections = {p for r in hostile["results"].values() for p in r["protections"]}
    assert {"no_capabilities", "no_other_processes", "no_network_sockets"} <= protections, protections
    assert run["interference"] == []
    assert all(r["protections"] for name, r in hostile["results"].items()), "every worker was confined"


def test_every_attack_gets_a_verdict_with_a_one_line_reason(hostile):
    results = hostile["results"]
    assert set(results) == {f"h_{a}.py" for a in ATTACKS} | {HONEST, VICTIM}
    for name, result in results.items():
        assert result["status"] == "ok" or (result["error"] and "\n" not in result["error"]), name


def test_nothing_outside_the_scratch_dirs_changed(hostile):
    assert hostile["after"] == hostile["before"]
    assert not list(hostile["paths"]["build"].rglob("evil.so"))
    assert not list(hostile["paths"]["build"].rglob("fill*.bin"))  # what a worker wrote past the limit is not kept
    with sqlite3.connect(hostile["paths"]["other"] / "other_run.db") as other:
        assert other.execute("SELECT status FROM results").fetchall() == [("ok",)]


def test_the_results_are_the_harness_own(hostile):
    with sqlite3.connect(hostile["paths"]["run"] / "h.db") as db:
        stored = dict(db.execute("SELECT candidate, status FROM results"))
    assert {name.split("/")[-1]: status for name, status in stored.items()} == \
        {name: r["status"] for name, r in hostile["results"].items()}
    assert "owned" not in (hostile["paths"]["run"] / "out" / "results.jsonl").read_text()


def test_no_secret_leaves_the_parent_and_no_connection_is_made(hostile):
    assert SECRET not in (hostile["paths"]["run"] / "out" / "results.jsonl").read_text()
    assert hostile["results"]["h_snoop.py"]["status"] == "ok"
    assert hostile["results"]["h_read_cwd.py"]["status"] == "ok"  # the directory it runs in is not the workers' to read
    assert "decoy-in-the-directory" not in (hostile["paths"]["run"] / "out" / "results.jsonl").read_text()
    assert hostile["listener"].connections == 0


def test_no_worker_lists_or_reads_another_process_in_proc(hostile):
    """Without a PID namespace of its own (hosts without user namespaces) a worker listed the
    command lines of the host's processes, the harness's among them (issue 54); its Landlock rules
    now cover its own /proc/<pid> and a few host-wide files only, on every host."""
    assert hostile["results"]["h_proc_list.py"]["status"] == "ok", hostile["results"]["h_proc_list.py"]["error"]
    assert all("own_proc_only" in r["protections"] for r in hostile["results"].values())
    assert hostile["results"][HONEST]["status"] == hostile["results"][VICTIM]["status"] == "ok"


def test_signals_cannot_reach_the_harness_or_the_reference(hostile):
    assert hostile["results"]["h_signals.py"]["status"] == "ok"
    assert hostile["results"][HONEST]["status"] == "ok"  # judged after the attack, by the same reference


def test_no_worker_limits_starves_or_reprioritises_the_harness_or_the_reference_nor_sends_a_datagram(hostile):
    """Without namespaces a red team's workers set the harness's RLIMIT_CPU (it was killed), and
    sent what they found over UDP to 127.0.0.1 (2026-12-07)."""
    assert hostile["done"].returncode == 0, hostile["done"].stderr[-2000:]
    assert hostile["results"]["h_other_processes.py"]["status"] == "ok"
    assert hostile["results"][HONEST]["status"] == "ok"  # judged after the attack, by the same reference
    assert hostile["listener"].datagrams == 0


def test_resource_bombs_are_stopped_with_the_limit_named(hostile):
    for attack, words in LIMIT_WORDS.items():
        result = hostile["results"][f"h_{attack}.py"]
        assert result["status"] != "ok" and words in result["error"], (attack, result["error"])


def test_no_process_of_the_run_is_left(hostile):
    assert survivors(*hostile["markers"]) == []


def test_forged_build_outcomes_change_no_later_run(hostile):
    """A second run on the same build cache: the victim is still built and correct, from the cache."""
    paths = hostile["paths"]
    for stale in (paths["candidates"] / "relu_4m").glob("h_*.py"):
        stale.unlink()
    done = run_harness(paths, "second-run", paths["run"] / "second.db", paths["run"] / "second", hostile["device"],
                       host=hostile["host"])
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["candidate"].split("/")[-1]: r for r in
               map(json.loads, (paths["run"] / "second" / "results.jsonl").read_text().splitlines())}
    victim = results[VICTIM]
    assert victim["status"] == "ok" and victim["build_cached"], (victim["error"], (victim["log_tail"] or "")[-1500:])
    # The same honest verdicts as with the attackers beside them, and timings within this machine's
    # run-to-run noise. Compared on each run's fastest calls: on a busy 2-core CPU a burst of load
    # can cover all 20 timed calls of one side (CI: a candidate's median 3.2 ms in one run, 11.3 ms
    # in the next, its reference 1.2 and 1.0 ms), while something left running by an attacker would
    # slow every call, the fastest too.
    for name in (HONEST, VICTIM):
        assert results[name]["status"] == hostile["results"][name]["status"] == "ok"
        fastest = [(r[name]["timing"]["min_ms"], r[name]["reference_timing"]["min_ms"]) for r in (results, hostile["results"])]
        ratio = (fastest[0][1] / fastest[0][0]) / (fastest[1][1] / fastest[1][0])
        assert 0.33 < ratio < 3, (name, ratio, fastest)


def test_strict_refuses_where_the_kernel_lacks_what_it_needs(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    assert main(["eval", str(DATA / "candidates"), "--problems", str(DATA / "problems"), "--device", "cpu",
                 "--db", str(tmp_path / "h.db"), "--sandbox", "strict"]) == 2
    assert "--sandbox strict needs Landlock ABI 6" in capsys.readouterr().err
    assert not (tmp_path / "h.db").exists()  # refused before anything was recorded


def test_auto_without_landlock_still_runs_and_says_what_it_could_not_enforce(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    folder = tmp_path / "c" / "tiny_relu"
    folder.mkdir(parents=True)
    (folder / "honest.py").write_text(textwrap.dedent(HONEST_RELU))
    assert main(["eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"), "--device", "cpu", "--trials", "3",
                 "--db", str(tmp_path / "h.db"), "--out", str(tmp_path / "out"), "--sandbox", "auto"]) == 0
    err = capsys.readouterr().err
    assert "warning: the sandbox lacks landlock_filesystem" in err
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert any(m.startswith("landlock_filesystem") for m in run["sandbox"]["missing"])


def test_without_a_sandbox_a_killed_reference_is_restarted_and_only_its_killer_fails(tmp_path):
    """The candidate that kills its reference worker crashes; the reference starts afresh and the
    candidates after it are judged (none is skipped)."""
    scratch, folder = tmp_path / "scratch", tmp_path / "c" / "tiny_relu"
    scratch.mkdir()
    folder.mkdir(parents=True)
    (folder / "a_kills_reference.py").write_text(textwrap.dedent(f"""
        import os, signal
        import torch.nn as nn

        class ModelNew(nn.Module):
            def forward(self, x):
                for name in os.listdir("/proc"):
                    try:
                        cmdline = open(f"/proc/{{name}}/cmdline", "rb").read().decode(errors="replace")
                    except OSError:
                        continue
                    if {str(scratch)!r} in cmdline and "/harness-reference-" in cmdline:
                        os.kill(int(name), signal.SIGKILL)
                return (x + x.abs()) * 0.5
        """))
    for name in ("b_honest.py", "c_honest.py"):
        (folder / name).write_text(HONEST_RELU)
    done = subprocess.run([sys.executable, "-m", "harness", "eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"),
                           "--device", "cpu", "--trials", "3", "--sandbox", "off", "--db", str(tmp_path / "h.db"),
                           "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=os.environ | {"TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    killer = results["tiny_relu/a_kills_reference.py"]
    assert killer["status"] == "crash" and "reference worker died" in killer["error"]
    assert [results[f"tiny_relu/{n}"]["status"] for n in ("b_honest.py", "c_honest.py")] == ["ok", "ok"]


NESTED = '''
import os
import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401  (a C++ candidate: built ahead)


def nest(root, depth=3000):
    """Directories nested past Python's recursion limit (made by descriptor: no path is too long)."""
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        try:
            os.mkdir("d", dir_fd=fd)
        except FileExistsError:
            pass
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


nest(os.environ["TORCH_EXTENSIONS_DIR"])  # what a build's files are copied from
nest("nested")  # the scratch dir


class ModelNew(nn.Module):
    def forward(self, x):
        return (x + x.abs()) * 0.5
'''


def test_a_tree_nested_past_the_recursion_limit_neither_stops_the_run_nor_stays(tmp_path):
    """Copying a build's files and removing a worker's scratch walk trees a candidate made: they
    must not recurse without bound (shutil's do, on Python 3.11)."""
    scratch, folder = tmp_path / "scratch", tmp_path / "c" / "tiny_relu"
    scratch.mkdir()
    folder.mkdir(parents=True)
    (folder / "a_nests.py").write_text(NESTED)
    (folder / "b_honest.py").write_text(HONEST_RELU)
    done = subprocess.run([sys.executable, "-m", "harness", "eval", str(tmp_path / "c"), "--problems", str(DATA / "problems"),
                           "--device", "cpu", "--trials", "3", "--db", str(tmp_path / "h.db"), "--out", str(tmp_path / "out"),
                           "--build-dir", str(tmp_path / "build")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=os.environ | {"TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert {name: r["status"] for name, r in results.items()} == {"tiny_relu/a_nests.py": "ok", "tiny_relu/b_honest.py": "ok"}
    assert list(scratch.iterdir()) == []
    assert max(len(path.relative_to(tmp_path / "build").parts) for path in (tmp_path / "build").rglob("*")) < 10
