"""The build cache: keyed by code and toolchain, locked between runs, never stuck on a lock a killed build left."""

import subprocess
import sys
import threading
import time

import json
import os

from harness.builds.cache import BuildCache, BuildOutcome, BuildStatus, Toolchain, key_lock


TOOLCHAIN = Toolchain(torch="2.13.0", cuda="13.0", arch_list="9.0", python="cpython-311-linux", flags={},
                      build_layout="private")


def test_key_changes_with_code_and_every_part_of_the_toolchain():
    base = TOOLCHAIN.key("a" * 64)
    assert TOOLCHAIN.key("a" * 64) == base
    assert TOOLCHAIN.key("b" * 64) != base
    for change in ({"torch": "2.14.0"}, {"cuda": "12.8"}, {"arch_list": "9.0;10.0"}, {"python": "cpython-312-linux"},
                   {"flags": {"CXX": "clang++"}}, {"build_layout": "in_place"}):
        assert TOOLCHAIN.model_copy(update=change).key("a" * 64) != base, change


def test_arch_list_is_passed_to_builds_and_evaluations_alike():
    assert TOOLCHAIN.env() == {"TORCH_CUDA_ARCH_LIST": "9.0"}
    assert TOOLCHAIN.model_copy(update={"arch_list": None}).env() == {}


def test_lock_clears_a_baton_a_killed_build_left(tmp_path):
    baton = tmp_path / "key" / "tiny_relu" / "lock"
    baton.parent.mkdir(parents=True)
    baton.write_text("")
    with key_lock(tmp_path / "key"):
        assert not baton.exists()


def test_lock_is_exclusive_between_threads(tmp_path):
    events = []

    def second():
        with key_lock(tmp_path / "key"):
            events.append("second")

    with key_lock(tmp_path / "key"):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.5)
        events.append("first done")
    thread.join(timeout=10)
    assert events == ["first done", "second"]


def test_lock_of_a_killed_holder_is_released(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
from pathlib import Path
from harness.builds.cache import key_lock
with key_lock(Path({str(tmp_path / "key")!r})):
    print("held", flush=True)
    time.sleep(600)
"""], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait()
    acquired = threading.Event()
    thread = threading.Thread(target=lambda: (key_lock(tmp_path / "key").__enter__(), acquired.set()), daemon=True)
    thread.start()
    assert acquired.wait(timeout=10)


def test_key_dirs_differ_by_code(tmp_path):
    cache = BuildCache(tmp_path, TOOLCHAIN)
    assert cache.key_dir("a" * 64) != cache.key_dir("b" * 64)
    assert cache.key_dir("a" * 64).parent == tmp_path.resolve()


def test_outcomes_are_read_back_only_when_this_cache_signed_them(tmp_path):
    cache = BuildCache(tmp_path / "root", TOOLCHAIN)
    key_dir = cache.key_dir("a" * 64)
    key_dir.mkdir()
    assert cache.read_outcome(key_dir) is None
    cache.write_outcome(key_dir, BuildOutcome(key=key_dir.name, status=BuildStatus.built, seconds=3.0))
    assert cache.read_outcome(key_dir).status is BuildStatus.built
    assert BuildCache(tmp_path / "root", TOOLCHAIN).read_outcome(key_dir).seconds == 3.0  # the key is the root's

    outcome_file = key_dir.parent / f"{key_dir.name}.outcome.json"
    stored = json.loads(outcome_file.read_text())
    forged = BuildOutcome(key=key_dir.name, status=BuildStatus.failed).model_dump_json()
    outcome_file.write_text(json.dumps({"outcome": forged, "mac": stored["mac"]}))
    assert cache.read_outcome(key_dir) is None  # altered: built again
    elsewhere = BuildCache(tmp_path / "other", TOOLCHAIN)  # another root's key signs differently
    elsewhere.write_outcome(key_dir, BuildOutcome(key=key_dir.name, status=BuildStatus.failed))
    assert cache.read_outcome(key_dir) is None
    assert (tmp_path / "root" / ".harness-key").stat().st_mode & 0o777 == 0o600


def test_what_a_worker_plants_in_its_key_dir_leads_the_harness_nowhere(tmp_path):
    """Without namespaces a worker builds in the key dir itself and can write there: directories,
    FIFOs and links, at the names the cache once used for its outcome and lock, or named like a
    build dir, and the key dir's own mode. The cache's own files are beside the key dir, so none
    of it stops a build or a load, and nothing outside is created, written or removed."""
    cache = BuildCache(tmp_path / "root", TOOLCHAIN)
    key_dir = cache.key_dir("a" * 64)
    key_dir.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "lock").write_text("not torch's")
    (key_dir / ".harness-lock").mkdir()
    os.mkfifo(key_dir / "outcome.json")
    (key_dir / ".lock").symlink_to(outside / "created")
    (key_dir / "ext").symlink_to(outside)
    with key_lock(key_dir):
        cache.write_outcome(key_dir, BuildOutcome(key=key_dir.name, status=BuildStatus.built))
    assert cache.read_outcome(key_dir).status is BuildStatus.built
    assert sorted(p.name for p in outside.iterdir()) == ["lock"] and (outside / "lock").read_text() == "not torch's"

    key_dir.chmod(0)
    with key_lock(key_dir):  # the harness's own dir: its mode is the harness's to set back
        assert key_dir.stat().st_mode & 0o777 == 0o700
