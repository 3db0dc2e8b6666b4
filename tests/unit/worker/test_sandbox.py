"""Confinement, piece by piece: the rules each kind of worker gets, the run's policy and what it
reports, and the kernel mechanisms themselves (Landlock, namespaces, the process tree)."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.records import Limits, SandboxMode
from harness.worker import confine, processes
from harness.worker.launch import BOOTSTRAP
from harness.worker.parent import Placement, Watchdog, Worker
from harness.worker.sandbox import (CANONICAL_SCRATCH, GPU_NODE, PACKAGE_DIR, Confinement, SandboxPolicy,
                                    confinement, decide_policy, device_nodes, mount_point, own_dev,
                                    python_path, readable_paths, works)

LIMITS = Limits(host_memory=1 << 30)
FULL = SandboxPolicy(mode=SandboxMode.auto, landlock_abi=7, namespaces=True, limits=LIMITS)
needs_landlock = pytest.mark.skipif(not confine.landlock_abi(), reason="needs a kernel with Landlock")


def rules(tmp_path, policy=FULL, **kind):
    return confinement(policy, tmp_path / "scratch", env={"PATH": "/usr/bin"}, **kind)


def test_with_namespaces_every_worker_works_at_one_canonical_path_and_writes_no_cache(tmp_path):
    """A build and a later load see the same absolute paths (ninja finds the build up to date);
    the parent copies builds into the cache and out of it, so no worker writes the cache."""
    build = rules(tmp_path, sees_gpu=False, key_dir=tmp_path / "key")
    assert build.workdir == CANONICAL_SCRATCH and build.extensions_dir == f"{CANONICAL_SCRATCH}/ext"
    assert set(build.write) == {CANONICAL_SCRATCH, "/dev/shm"} and build.pid_namespace
    assert "RLIMIT_FSIZE" in build.rlimits and build.rlimits["RLIMIT_CORE"] == 0
    assert "private_build_dir" in build.protections()


def test_without_namespaces_a_worker_writes_its_own_key_dir_only(tmp_path):
    landlock_only = FULL.model_copy(update={"namespaces": False})
    worker = rules(tmp_path, policy=landlock_only, sees_gpu=False, key_dir=tmp_path / "key")
    assert set(worker.write) == {str(tmp_path / "scratch"), str(tmp_path / "key")}
    assert worker.workdir == str(tmp_path / "scratch") and "RLIMIT_NPROC" not in worker.rlimits


def test_a_worker_that_sees_a_gpu_keeps_the_host_pid_namespace(tmp_path):
    """CUDA's IPC handles do not cross PID namespaces."""
    gpu = rules(tmp_path, sees_gpu=True)
    assert not gpu.pid_namespace and gpu.namespaces


def fake_dev(tmp_path, *gpus: int) -> Path:
    """A /dev with the NVIDIA driver's nodes for `gpus` (regular files standing in for them)."""
    dev = tmp_path / "dev"
    (dev / "shm").mkdir(parents=True)
    names = ["null", "zero", "urandom"] + (["nvidiactl", "nvidia-uvm"] if gpus else []) + [f"nvidia{g}" for g in gpus]
    for name in names:
        (dev / name).write_text("")
    (dev / "stdout").symlink_to("/proc/self/fd/1")
    return dev


def test_a_worker_that_sees_no_gpu_may_open_none_of_the_nvidia_drivers_nodes(tmp_path):
    """A build worker imports a candidate while the lanes time others on their GPUs."""
    dev = fake_dev(tmp_path, 0, 1)
    assert {Path(p).name for p in device_nodes(False, str(dev))} == {"null", "zero", "urandom", "shm"}
    assert device_nodes(True, str(dev)) == [str(dev)]


def test_a_worker_that_sees_a_gpu_gets_a_dev_of_its_own_without_the_other_gpus_nodes(tmp_path):
    """Denied another GPU's node, the CUDA driver did not start; absent, as in a container, it does."""
    dev = fake_dev(tmp_path, 0, 1)
    kept = {Path(p).name for p in own_dev(str(dev / "nvidia1"), str(dev))}
    assert kept == {"null", "zero", "urandom", "shm", "stdout", "nvidiactl", "nvidia-uvm", "nvidia1"}
    assert own_dev(None, str(dev)) is None and own_dev(str(dev / "nvidia1"), str(fake_dev(tmp_path / "cpu"))) is None
    gpu = rules(tmp_path, sees_gpu=True, gpu_node="/dev/nvidia1")
    # Here, only on a machine with GPU nodes (the GPU machine has /dev/nvidia0 alone: it got one).
    assert (gpu.dev is not None) == any(GPU_NODE.fullmatch(name) for name in os.listdir("/dev"))
    assert "own_gpu_node_only" in Confinement(dev=["/dev/null"], landlock_abi=6).protections()
    assert "own_gpu_node_only" not in Confinement(dev=["/dev/null"]).protections()
    landlock_only = FULL.model_copy(update={"namespaces": False})
    assert rules(tmp_path, policy=landlock_only, sees_gpu=True, gpu_node="/dev/nvidia1").dev is None


def test_a_worker_with_a_dev_of_its_own_names_its_gpu_as_the_only_one():
    """The driver numbers the GPUs whose nodes it finds: with one, that one is 0, and the index
    the GPU had among all of them names none (measured on two H100s). A UUID names it anyway."""
    def env(visible: str, dev: list[str] | None) -> str:
        worker = Worker.__new__(Worker)  # only its environment is made
        worker.placement, worker.key_dir = Placement(gpu=1, env={"CUDA_VISIBLE_DEVICES": visible}), None
        worker.reuses_memory = False  # a GPU run's
        worker.confinement = Confinement(scratch="/s", workdir="/s", dev=dev)
        return worker._env()["CUDA_VISIBLE_DEVICES"]

    assert env("1", ["/dev/null", "/dev/nvidia1"]) == "0"
    assert env("GPU-94791026", ["/dev/null", "/dev/nvidia1"]) == "GPU-94791026"
    assert env("1", None) == "1"


def test_without_the_nvidia_drivers_nodes_all_of_dev_is_usable(tmp_path):
    dev = fake_dev(tmp_path)
    assert device_nodes(False, str(dev)) == device_nodes(True, str(dev)) == [str(dev)]
    assert "no_gpu_nodes" not in Confinement(landlock_abi=7, device=["/dev"]).protections()
    assert "no_gpu_nodes" in Confinement(landlock_abi=7, device=["/dev/null", "/dev/zero"]).protections()
    assert "no_gpu_nodes" not in Confinement(landlock_abi=0, device=["/dev/null", "/dev/zero"]).protections()


def test_reads_cover_python_and_the_harness_but_not_home_or_tmp(tmp_path):
    readable = readable_paths({"PATH": "/usr/bin"})
    assert PACKAGE_DIR in readable and sys.base_prefix in readable
    assert str(Path.home()) not in readable and "/tmp" not in readable
    assert "" not in python_path() and all(os.path.isabs(p) for p in python_path())


def test_the_directory_the_harness_runs_in_is_not_readable_though_on_its_import_path(tmp_path, monkeypatch):
    """`python -m harness` puts the current directory on sys.path (an editable install its
    checkout): it may hold a .env or the results; what lies below it on the import path stays."""
    work = tmp_path / "project"
    site = work / ".venv" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "path", [str(work), str(tmp_path), str(site), *sys.path])
    for paths in (python_path(), readable_paths({"PATH": f"{work}:/usr/bin"})):
        assert str(work) not in paths and str(tmp_path) not in paths and str(site) in paths


@pytest.mark.parametrize("installed", [True, False])
def test_an_installed_harness_keeps_its_site_dir_and_an_editable_one_hides_its_checkout(tmp_path, monkeypatch, installed):
    """Installed, the package sits in site-packages beside torch, which workers need; editable,
    its parent is a checkout (a pyproject.toml), which may hold the results."""
    from harness.worker import sandbox

    parent = tmp_path / ("lib/site-packages" if installed else "checkout")
    (parent / "harness").mkdir(parents=True)
    if not installed:
        (parent / "pyproject.toml").write_text("")
    monkeypatch.setattr(sandbox, "PACKAGE_DIR", str(parent / "harness"))
    monkeypatch.setattr(sandbox.site, "getsitepackages", lambda: [str(parent)] if installed else [])
    monkeypatch.setattr(sys, "path", [str(parent), *sys.path])
    assert (str(parent) in python_path()) is installed


def test_a_build_may_read_the_precompiled_header_its_cpath_names(tmp_path):
    header = tmp_path / "headers" / "digest"
    header.mkdir(parents=True)
    assert str(header) in readable_paths({"PATH": "/usr/bin", "CPATH": str(header)})
    assert str(tmp_path) not in readable_paths({"PATH": "/usr/bin", "CPATH": str(header)})


def test_a_worker_reads_the_harness_bytecode_and_may_not_write_it(tmp_path):
    kept = tmp_path / "bytecode"
    kept.mkdir()
    for policy in (FULL, FULL.model_copy(update={"namespaces": False})):  # the second writes its key dir
        worker = rules(tmp_path, policy=policy, sees_gpu=False, key_dir=tmp_path / "key", bytecode=kept)
        assert worker.pycache_prefix == str(kept) and str(kept) in worker.read
        assert not any(str(kept).startswith(path) for path in worker.write)
    assert rules(tmp_path, sees_gpu=False).pycache_prefix is None


def test_off_confines_nothing_but_keeps_the_parents_import_path(tmp_path):
    off = rules(tmp_path, policy=SandboxPolicy(mode=SandboxMode.off, limits=LIMITS), sees_gpu=False)
    assert off.landlock_abi == 0 and not off.namespaces and off.rlimits == {} and off.python_path


def test_the_policy_reports_what_is_missing_and_why():
    report = SandboxPolicy(mode=SandboxMode.auto, landlock_abi=3, namespaces=False, limits=LIMITS).report()
    assert "landlock_filesystem" in report.active and report.confines_files
    assert any(m.startswith("landlock_scoped_signals: Landlock ABI 3 < 6") for m in report.missing)
    assert any(m.startswith("user_namespace: user namespaces are not available") for m in report.missing)
    assert not SandboxPolicy(mode=SandboxMode.off, limits=LIMITS).report().confines_files


def test_the_userfaultfd_filter_is_recorded_where_it_holds_under_every_mode(tmp_path):
    held = FULL.model_copy(update={"no_userfaultfd": True})
    assert "no_userfaultfd" in held.report().active
    assert "no_userfaultfd" in rules(tmp_path, policy=held, sees_gpu=False).protections()
    off = SandboxPolicy(mode=SandboxMode.off, no_userfaultfd=True, limits=LIMITS)
    assert rules(tmp_path, policy=off, sees_gpu=False).protections() == ["no_userfaultfd"]
    assert any(m.startswith("no_userfaultfd: no seccomp filters for ") for m in FULL.report().missing)
    assert "no_userfaultfd" not in rules(tmp_path, sees_gpu=False).protections()
    assert decide_policy(SandboxMode.off, LIMITS).no_userfaultfd == confine.filters_hold()


def test_a_launcher_that_cannot_apply_the_userfaultfd_filter_starts_no_worker(tmp_path):
    """Asked for the filter, on a kernel that refuses it (here: seccomp itself denied to the
    launcher by a filter of this test's), the launcher refuses to start the worker."""
    spec = tmp_path / "launch.json"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spec.write_text(Confinement(scratch=str(scratch), workdir=str(scratch), python_path=python_path(),
                                no_userfaultfd=True).model_dump_json())
    done = run_confined(f"""
        import platform, subprocess
        seccomp = confine.SECCOMP_CALL[platform.machine()]
        confine.DENIABLE[platform.machine()]["seccomp"] = [(arch, seccomp, None) for arch in (confine.X86_64, confine.AARCH64)]
        for asked in (False, True):
            spec = {str(spec)!r}
            if not asked:
                spec = spec + ".plain"
                open(spec, "w").write(open({str(spec)!r}).read().replace('"no_userfaultfd":true', '"no_userfaultfd":false'))
            if asked:
                print("seccomp denied", confine.deny(["seccomp"]))
            launcher = subprocess.run([sys.executable, "-I", "-c", {BOOTSTRAP!r}, {PACKAGE_DIR!r}, spec, "-1", "-1", "-1", "-1"],
                                      capture_output=True, text=True)
            print("asked" if asked else "not asked", launcher.returncode, launcher.stderr.strip().splitlines()[-1:])
    """, tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0] == "not asked 0 []", done.stdout + done.stderr
    assert lines[1] == "seccomp denied True", done.stdout + done.stderr
    assert lines[2].startswith(f"asked {confine.CONFINE_FAILED} ") and "denies userfaultfd was refused" in lines[2], lines


def run_confined(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """A child that loads confine.py by path and runs `script` with it (nothing of the harness)."""
    loader = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("confine", {str(Path(confine.__file__))!r})
        confine = importlib.util.module_from_spec(spec); spec.loader.exec_module(confine)
    """)
    return subprocess.run([sys.executable, "-I", "-c", loader + textwrap.dedent(script)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


@needs_landlock
def test_landlock_allows_writes_only_where_told(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "theirs").write_text("untouched")
    done = run_confined(f"""
        confine.landlock(confine.landlock_abi(), [({str(tmp_path / 'mine')!r}, confine.handled_fs(confine.landlock_abi()))]
                         + [(p, confine.READ) for p in ("/usr", "/lib", "/lib64", "/etc", sys.base_prefix)])
        open({str(tmp_path / 'mine' / 'ok')!r}, "w").write("x")
        try:
            open({str(tmp_path / 'theirs')!r}, "w").write("owned")
        except PermissionError:
            print("denied")
    """, tmp_path)
    assert done.stdout.strip() == "denied", done.stderr
    assert (tmp_path / "mine" / "ok").exists() and (tmp_path / "theirs").read_text() == "untouched"


def test_a_held_worker_moves_to_no_other_core_nor_does_anything_it_starts(tmp_path):
    """After hold_affinity, sched_setaffinity fails in the thread that held it, in a thread
    started before, and in a process started after; other calls are untouched."""
    done = run_confined("""
        import os, subprocess, threading
        cores = os.sched_getaffinity(0)
        tried = threading.Event()
        results = {}

        def earlier():
            tried.wait()
            try:
                os.sched_setaffinity(0, cores)
                results["thread"] = "moved"
            except PermissionError:
                results["thread"] = "denied"

        thread = threading.Thread(target=earlier)
        thread.start()
        print("held", confine.hold_affinity())
        try:
            os.sched_setaffinity(0, cores)
            print("process moved")
        except PermissionError:
            print("process denied")
        tried.set()
        thread.join()
        print("thread", results["thread"])
        child = subprocess.run([sys.executable, "-c", "import os; os.sched_setaffinity(0, os.sched_getaffinity(0))"],
                               capture_output=True, text=True)
        print("child", "denied" if "PermissionError" in child.stderr else "moved")
        print("other calls", os.sched_getaffinity(0) == cores and os.getpid() > 0)
    """, tmp_path)
    assert done.stdout.split("\n")[:5] == ["held True", "process denied", "thread denied", "child denied",
                                           "other calls True"], done.stderr


def test_a_worker_may_make_no_userfaultfd(tmp_path):
    """userfaultfd (user-mode faults only: what an unprivileged process may ask for) works before
    no_userfaultfd and fails with EPERM after it, in this process and in one it starts; so does
    /dev/userfaultfd's ioctl where this user may open that node (root: this machine, CI); other
    ioctls go on working."""
    done = run_confined("""
        import ctypes, errno, os, platform, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        number = confine.DENIABLE[platform.machine()]["userfaultfd"][0][1]
        def outcome(fd):
            return "made" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
        def by_call():
            return outcome(libc.syscall(number, os.O_CLOEXEC | 1))  # UFFD_USER_MODE_ONLY
        def by_device():
            try:
                node = os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                return "no node"  # absent (before Linux 6.1), or not this user's to open
            return outcome(libc.ioctl(node, confine.USERFAULTFD_IOC_NEW, os.O_CLOEXEC))
        def other_ioctl():
            read, write = os.pipe()
            os.write(write, b"abc")
            waiting = ctypes.c_int()
            libc.ioctl(read, 0x541B, ctypes.byref(waiting))  # FIONREAD
            return waiting.value
        print("before", by_call(), by_device())
        print("denied", confine.no_userfaultfd())
        print("after", by_call(), by_device(), other_ioctl())
        child = subprocess.run([sys.executable, "-c", f"import ctypes; print(ctypes.CDLL(None).syscall({number}, 1))"],
                               capture_output=True, text=True)
        print("child", child.stdout.strip())
    """, tmp_path)
    before, denied, after, child = done.stdout.split("\n")[:4]
    if not before.startswith("before made"):
        pytest.skip(f"this kernel makes no userfaultfd for this user ({before})")
    device_after = "no node" if before.endswith("no node") else "EPERM"
    assert (denied, after, child) == ("denied True", f"after EPERM {device_after} 3", "child -1"), done.stderr


@needs_landlock
def test_landlock_keeps_a_worker_that_sees_no_gpu_off_the_nvidia_drivers_nodes(tmp_path):
    dev = fake_dev(tmp_path, 0)
    done = run_confined(f"""
        confine.landlock(confine.landlock_abi(), [(p, confine.DEVICE) for p in {device_nodes(False, str(dev))!r}]
                         + [(p, confine.READ) for p in ("/usr", "/lib", "/lib64", "/etc", sys.base_prefix)])
        for name in ("null", "nvidiactl", "nvidia0"):
            try:
                open({str(dev)!r} + "/" + name, "r+").close()
                print(name, "opened")
            except PermissionError:
                print(name, "denied")
    """, tmp_path)
    assert done.stdout.split("\n")[:3] == ["null opened", "nvidiactl denied", "nvidia0 denied"], done.stderr


@pytest.mark.skipif(not works(Confinement(namespaces=True, pid_namespace=True, workdir=mount_point(),
                                          python_path=python_path())), reason="needs user namespaces")
def test_a_worker_sees_only_its_own_processes_and_its_scratch_at_the_canonical_path(tmp_path):
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "mine").write_text("x")
    done = run_confined(f"""
        import os
        confine.enter_namespaces(pid=True)
        if os.fork() == 0:
            confine.private_mounts({str(tmp_path / "scratch")!r}, {mount_point()!r}, 1 << 20, proc=True)
            print(os.getpid(), sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), os.getcwd(),
                  sorted(os.listdir(".")), flush=True)
            os._exit(0)
        os.wait()
    """, tmp_path)
    assert done.stdout.strip() == f"1 [1] {CANONICAL_SCRATCH} ['mine']", done.stderr
    assert os.listdir(CANONICAL_SCRATCH) == []  # seen from here: only ever a mount point


@pytest.mark.skipif(not works(Confinement(namespaces=True, pid_namespace=True, workdir=mount_point(),
                                          python_path=python_path())), reason="needs user namespaces")
def test_a_dev_of_its_own_holds_only_the_entries_it_was_given(tmp_path):
    """/dev/zero left out: absent (not denied); the rest as on the host, /dev/shm its own. An entry
    gone since the parent listed /dev (a device unplugged) is absent too, not a failure."""
    (tmp_path / "scratch").mkdir()
    kept = [os.path.join("/dev", name) for name in sorted(os.listdir("/dev")) if name != "zero"] + ["/dev/unplugged"]
    done = run_confined(f"""
        import os
        confine.enter_namespaces(pid=True)
        if os.fork() == 0:
            confine.private_mounts({str(tmp_path / "scratch")!r}, {mount_point()!r}, 1 << 20, proc=True, dev={kept!r})
            open("/dev/shm/mine", "w").write("x")
            print(os.path.exists("/dev/zero"), os.path.exists("/dev/unplugged"), open("/dev/null", "rb").read(),
                  os.path.islink("/dev/stdout"), os.listdir("/dev/shm"), flush=True)
            os._exit(0)
        os.wait()
    """, tmp_path)
    assert done.stdout.strip() == "False False b'' True ['mine']", done.stderr
    assert os.path.exists("/dev/zero") and not os.path.exists("/dev/shm/mine")  # the host's untouched


def test_the_process_tree_is_killed_whole_a_double_fork_included(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, ctypes
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # a subreaper, as the launcher is
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pid_file)!r}, "w").write(str(os.getpid())); time.sleep(300)
            os._exit(0)
        time.sleep(300)
    """)])
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    assert grandchild in processes.descendants(parent.pid)  # adopted by the subreaper, still in the tree
    processes.kill_tree(parent.pid)
    parent.wait(timeout=10)
    time.sleep(0.2)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split(")")[1][:3]


def filters(pid: int) -> int:
    """How many seccomp filters hold the process."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Seccomp_filters:")[1].split()[0])


def gone(pid: int) -> bool:
    return processes.state(f"/proc/{pid}/stat") in ("Z", "X", None)


def test_the_watchdog_kills_a_tree_that_passes_its_process_limit(tmp_path):
    spawner = subprocess.Popen([sys.executable, "-c", "import subprocess, time\n"
                                "kids = [subprocess.Popen(['sleep', '60']) for _ in range(12)]\ntime.sleep(60)"])
    killed = []
    watchdog = Watchdog(spawner.pid, [tmp_path], Limits(host_memory=1 << 34, processes=5),
                        lambda: (killed.append(True), processes.kill_tree(spawner.pid)))
    spawner.wait(timeout=30)
    watchdog.stop()
    assert killed and "processes, over the limit of 5" in watchdog.violation


def test_memory_forks_share_is_counted_once_before_the_watchdog_kills(tmp_path, monkeypatch):
    """Four forks of a process holding 256 MB share its pages copy-on-write: their resident sizes
    add up to over 1 GiB, the memory they hold to about 256 MB, under a 768 MB limit."""
    forker = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                               "held = bytearray(256 << 20)\n"
                               "for _ in range(4):\n"
                               "    if os.fork() == 0:\n"
                               "        time.sleep(60); os._exit(0)\n"
                               "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert forker.stdout.readline().strip() == "ready"
        tree = processes.tree(forker.pid)
        assert len(tree) == 5 and processes.resident_bytes(tree) > 1 << 30
        assert processes.proportional_bytes(tree) < 400 << 20
        watchdog = Watchdog(forker.pid, [tmp_path], Limits(host_memory=768 << 20, processes=50), lambda: None)
        assert watchdog._check() is None
        watchdog.stop()
        # A rollup it cannot read (a non-dumpable process, seen without root) counts as resident, never as free.
        real_open = open
        monkeypatch.setattr("builtins.open", lambda path, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied"))
                            if str(path).endswith("smaps_rollup") else real_open(path, *a, **k))
        assert processes.proportional_bytes(tree) == processes.resident_bytes(tree)
    finally:
        processes.kill_tree(forker.pid)
        forker.wait()


def test_scratch_use_is_counted_only_as_far_as_needed(tmp_path):
    for index in range(5):
        (tmp_path / f"f{index}").write_bytes(b"x" * 100_000)
    assert processes.directory_bytes(tmp_path, 10 << 20) >= 500_000
    assert processes.directory_bytes(tmp_path, 150_000) < 500_000  # stopped early
