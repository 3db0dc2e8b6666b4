"""Confinement, piece by piece: the rules each kind of worker gets, the run's policy and what it
reports, and the kernel mechanisms themselves (Landlock, namespaces, the process tree)."""

import os
import platform
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.records import Limits, SandboxMode
from harness.worker import confine, processes
from harness.worker.launch import BOOTSTRAP, _landlock_rules
from harness.worker.parent import Placement, Watchdog, Worker
from harness.worker.sandbox import (CANONICAL_SCRATCH, GPU_NODE, HOST_PROC, PACKAGE_DIR, Confinement, SandboxPolicy,
                                    confinement, decide_policy, device_nodes, mount_point, own_dev,
                                    etc_entries, python_path, readable_paths, works)

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
    assert "RLIMIT_FSIZE" in build.rlimits and build.rlimits["RLIMIT_CORE"] == build.rlimits["RLIMIT_RTPRIO"] == 0
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


def test_a_worker_that_sees_no_gpu_reads_no_other_process_in_proc(tmp_path):
    """Without a PID namespace of its own a worker listed the command lines of the host's processes
    (issue 54): with namespaces or without, no read rule holds /proc (a rule on "/" would), only
    the host-wide files; the launcher adds its own /proc/<pid>. Every worker of a CUDA run reads
    all of /proc (the CUDA driver's files there; nvcc's needs untried on a GPU)."""
    for policy in (FULL, FULL.model_copy(update={"namespaces": False})):
        cpu = rules(tmp_path, policy=policy, sees_gpu=False)
        assert not [path for path in cpu.read if os.path.commonpath([path, "/proc"]) == path]
        assert set(HOST_PROC) <= set(cpu.read) and "own_proc_only" in cpu.protections()
        gpu = rules(tmp_path, policy=policy, sees_gpu=True, cuda_run=True)
        assert "/proc" in gpu.read and "own_proc_only" not in gpu.protections()
        cuda_build = rules(tmp_path, policy=policy, sees_gpu=False, cuda_run=True)  # nvcc, untried on a GPU
        assert "/proc" in cuda_build.read and "own_proc_only" not in cuda_build.protections()
    assert "own_proc_only" not in rules(tmp_path, policy=SandboxPolicy(mode=SandboxMode.off, limits=LIMITS),
                                        sees_gpu=False).protections()


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


def test_reads_cover_etc_but_not_its_secrets(tmp_path):
    """A worker running as root without user namespaces owns /etc/shadow, capabilities or not."""
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    for name in ("passwd", "shadow", "gshadow", "ld.so.cache", "sudoers"):
        (etc / name).write_text("decoy")
    assert etc_entries(str(etc)) == [str(etc / "ld.so.cache"), str(etc / "passwd")]
    assert etc_entries(str(tmp_path / "none")) == []
    readable = readable_paths({"PATH": "/usr/bin"})
    assert "/etc" not in readable and "/etc/shadow" not in readable
    assert os.path.exists("/etc/passwd") <= ("/etc/passwd" in readable)


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


def confined(script: str) -> list[str]:
    """The command of a child that loads confine.py by path and runs `script` with it (nothing of the harness)."""
    loader = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("confine", {str(Path(confine.__file__))!r})
        confine = importlib.util.module_from_spec(spec); spec.loader.exec_module(confine)
    """)
    return [sys.executable, "-I", "-c", loader + textwrap.dedent(script)]


def run_confined(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(confined(script), cwd=tmp_path, capture_output=True, text=True, timeout=60)


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


def drop_dentries() -> bool:
    """Have the kernel drop every unused dentry and inode, /proc's included (root only): twice, as
    a dentry used since the last pass is kept once."""
    try:
        for _ in range(2):
            Path("/proc/sys/vm/drop_caches").write_text("2")
    except OSError:
        return False
    return True


@needs_landlock
def test_a_worker_reads_its_own_proc_entries_and_the_host_wide_files_but_no_other_process(tmp_path):
    """Under its rules without namespaces: its own /proc/<pid> (/proc/self resolved as it confines
    itself) and HOST_PROC, still after the kernel dropped their dentries (procfs then makes new
    inodes, which no rule held: the rules' paths are kept open); not /proc's list, nor the entries
    of another process (this test's)."""
    worker = rules(tmp_path, policy=FULL.model_copy(update={"namespaces": False}), sees_gpu=False)
    child = subprocess.Popen(confined(f"""
        import os
        confine.landlock(confine.landlock_abi(), {_landlock_rules(worker.model_dump())!r})

        def read(path):
            try:
                os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
            except PermissionError:
                return "denied"
            return "read"

        for _ in range(2):
            print(*map(read, ("/proc/self/status", "/proc/thread-self/comm", f"/proc/{{os.getpid()}}/task",
                              "/proc/cpuinfo", "/proc/sys/kernel/pid_max", "/proc", "/proc/{os.getpid()}/cmdline",
                              "/proc/{os.getpid()}/status")), flush=True)
            sys.stdin.readline()
    """), cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = [child.stdout.readline()]
    dropped = drop_dentries()
    child.stdin.write("go on\n")
    child.stdin.flush()
    seen.append(child.stdout.readline())
    _, err = child.communicate(timeout=60)
    expected = "read read read read read denied denied denied\n"
    assert seen == [expected, expected], (seen, dropped, err)


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


def test_what_a_worker_writes_into_its_scratch_and_key_dirs_together_counts_beyond_what_they_held(tmp_path):
    """Without namespaces a worker builds into its key dir of the build cache: a red team's wrote
    512 MB there past --max-scratch 256M, where it stayed (2026-12-07). An earlier build's files
    there are not its writing."""
    scratch, key_dir = tmp_path / "scratch", tmp_path / "key"
    scratch.mkdir()
    key_dir.mkdir()
    (key_dir / "earlier_build.so").write_bytes(b"x" * (3 << 20))  # more than the limit, held before it started
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watchdog = Watchdog(sleeper.pid, [scratch, key_dir], Limits(host_memory=1 << 34, processes=50, scratch=2 << 20),
                            lambda: None)
        watchdog.stop()
        assert watchdog._check() is None
        (scratch / "a").write_bytes(b"x" * (3 << 18))
        (key_dir / "b").write_bytes(b"x" * (3 << 18))
        assert watchdog._check() is None  # 1.5 MiB in all: under the limit
        (key_dir / "c").write_bytes(b"x" * (1 << 20))
        assert "--max-scratch" in watchdog._check() and watchdog.wrote_too_much
    finally:
        sleeper.kill()
        sleeper.wait()


KEPT_TO_ITSELF = """
    import ctypes, errno, os, resource, socket, subprocess, sys, time
    decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # another process of this user
    print("pid", decoy.pid)
    libc = ctypes.CDLL(None, use_errno=True)

    def tried(name, action):
        try:
            action()
            print(name, "done")
        except OSError as exc:
            print(name, errno.errorcode.get(exc.errno, exc.errno))

    def raw(number, *args):
        def call():
            if libc.syscall(number, *args) < 0:
                raise OSError(ctypes.get_errno(), "")
        return call

    print("filter", confine.keep_to_itself(confine.NETWORK_FAMILIES + (confine.AF_UNIX,), signals=True))
    confine.drop_capabilities()
    other, me = decoy.pid, os.getpid()
    tried("prlimit other", lambda: resource.prlimit(other, resource.RLIMIT_CPU, (1, 1)))
    tried("prlimit self", lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0)))
    tried("setpriority other", lambda: os.setpriority(os.PRIO_PROCESS, other, 19))
    tried("setpriority user", lambda: os.setpriority(os.PRIO_USER, os.getuid(), 19))
    tried("setpriority self", lambda: os.setpriority(os.PRIO_PROCESS, 0, 1))
    tried("sched other", lambda: os.sched_setscheduler(other, os.SCHED_BATCH, os.sched_param(0)))
    tried("sched self", lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)))
    tried("kill other", lambda: os.kill(other, 0))
    tried("kill self", lambda: os.kill(me, 0))
    tried("ptrace other", raw(101, 16, other, 0, 0))  # PTRACE_ATTACH
    tried("pidfd_open other", raw(434, other, 0))
    tried("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    tried("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    tried("pipe", os.pipe)
    with open("/proc/self/status") as status:
        caps = {line.split(":")[0]: line.split()[1] for line in status if line.startswith("Cap") or line.startswith("NoNewPrivs")}
    print("caps", sorted(set(v for k, v in caps.items() if k.startswith("Cap"))), "no_new_privs", caps["NoNewPrivs"])
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the filter's numbers are x86-64's")
def test_a_worker_kept_to_itself_cannot_act_on_another_process_nor_open_a_socket(tmp_path):
    """Without namespaces a red team's workers set the harness's RLIMIT_CPU (and it was killed),
    gave rivals an RLIMIT_AS, pinned them to one core, and sent findings over UDP and unix sockets;
    as root they kept CAP_SYS_PTRACE and read the harness's environment. Kept to itself, a process
    may still act on itself, and no capability is left."""
    done = run_confined(KEPT_TO_ITSELF, tmp_path)
    lines = done.stdout.splitlines()
    decoy = int(lines[0].split()[1]) if lines and lines[0].startswith("pid ") else None
    if decoy is not None:
        unchanged = resource.prlimit(decoy, resource.RLIMIT_CPU) == (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        os.kill(decoy, 9)
    seen = dict(line.rsplit(" ", 1) for line in lines if not line.startswith(("caps ", "pid ")))
    assert seen == {"filter": "True", "prlimit other": "EPERM", "prlimit self": "done", "setpriority other": "EPERM",
                    "setpriority user": "EPERM", "setpriority self": "done", "sched other": "EPERM", "sched self": "done",
                    "kill other": "EPERM", "kill self": "done", "ptrace other": "EPERM", "pidfd_open other": "EPERM",
                    "udp": "EPERM", "unix": "EPERM", "pipe": "done"}, done.stdout + done.stderr
    assert "caps ['0000000000000000'] no_new_privs 1" in lines and unchanged, done.stdout + done.stderr


def test_strict_refuses_a_host_where_workers_cannot_be_kept_to_themselves(monkeypatch):
    """Without the filter a worker reaches other processes of this user (and as root, with its
    capabilities, their environments): strict will not run there; auto runs and says so."""
    from harness.worker import sandbox

    monkeypatch.setattr(confine, "landlock_abi", lambda: 7)
    monkeypatch.setattr(sandbox, "works", lambda rules: True)
    monkeypatch.setattr(sandbox, "mount_point", lambda: "/tmp")
    monkeypatch.setattr(confine, "keeps_to_itself_here", lambda: False)
    with pytest.raises(sandbox.SandboxUnavailable, match=r"seccomp rules for .* \(x86-64 only\)"):
        sandbox.decide_policy(SandboxMode.strict, LIMITS)
    auto = sandbox.decide_policy(SandboxMode.auto, LIMITS)
    assert not auto.to_itself and any(m.startswith("workers_keep_to_themselves: no seccomp rules") for m in auto.report().missing)
    monkeypatch.setattr(confine, "keeps_to_itself_here", lambda: True)
    assert "workers_keep_to_themselves" in sandbox.decide_policy(SandboxMode.strict, LIMITS).report().active
