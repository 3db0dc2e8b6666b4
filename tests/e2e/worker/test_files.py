"""What an evaluating worker compiled, kept for the next evaluation of the same code, and nothing
kept where a worker swapped its extensions dir for a link (workers started for real)."""

import os

import pytest

from harness.inputs.problems import discover_problems
from harness.judge.reference import worker_job
from harness.records import EvalConfig, Limits, SandboxMode
from harness.worker import confine
from harness.worker.parent import Placement, Worker
from harness.worker.sandbox import TRITON_CACHE, Confinement, SandboxPolicy, mount_point, python_path, works
from tests.support import DATA


TRITON_LIKE = '''
import os
import pathlib

compiled = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "0f1e" / "softmax_kernel.cubin"
if compiled.exists():  # as Triton finds a kernel it compiled before
    raise RuntimeError("found " + compiled.read_text())
compiled.parent.mkdir(parents=True, exist_ok=True)
compiled.write_text("compiled once")
'''


@pytest.mark.parametrize("namespaces", [False, True], ids=["landlock_only", "namespaces"])
def test_what_triton_compiled_in_one_evaluation_is_found_by_the_next_of_the_same_code(tmp_path, namespaces):
    """Triton compiles at a candidate's first call, in its evaluation's worker, into the cache
    dir the worker is given; the parent keeps it in the build's key dir, where the next worker
    given that key finds it."""
    if not confine.landlock_abi() or (namespaces and not works(Confinement(
            namespaces=True, pid_namespace=True, workdir=mount_point(), python_path=python_path()))):
        pytest.skip("needs Landlock (and user namespaces)")
    policy = SandboxPolicy(mode=SandboxMode.auto, landlock_abi=confine.landlock_abi(), namespaces=namespaces,
                           limits=Limits(host_memory=4 << 30))
    problem = next(p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu")
    key_dir = tmp_path / "key"
    key_dir.mkdir()
    errors = []
    for _ in range(2):
        with Worker(Placement(sandbox=policy), role="candidate", device="cpu", timeout_s=60) as worker:
            worker.start(worker_job("candidate", problem, EvalConfig(device="cpu")), TRITON_LIKE, problem.source, key_dir)
            errors.append(worker.reply("load", 60).failure)
            worker.keep_triton_cache(key_dir)
    assert "found" not in str(errors[0]) and "found compiled once" in str(errors[1])
    assert (key_dir / TRITON_CACHE / "0f1e" / "softmax_kernel.cubin").read_text() == "compiled once"


LINKED_EXTENSIONS = '''
import os
import shutil

extensions = os.environ["TORCH_EXTENSIONS_DIR"]
shutil.rmtree(extensions, ignore_errors=True)
os.symlink({decoy!r}, extensions)  # the parent must not follow it to another key's cache
'''


def test_an_extensions_dir_swapped_for_a_link_keeps_nothing(tmp_path):
    if not confine.landlock_abi() or not works(Confinement(namespaces=True, pid_namespace=True, workdir=mount_point(),
                                                           python_path=python_path())):
        pytest.skip("needs Landlock and user namespaces")
    decoy = tmp_path / "other_key"
    (decoy / TRITON_CACHE / "0f1e").mkdir(parents=True)
    (decoy / TRITON_CACHE / "0f1e" / "their_kernel.cubin").write_text("another candidate's")
    policy = SandboxPolicy(mode=SandboxMode.auto, landlock_abi=confine.landlock_abi(), namespaces=True,
                           limits=Limits(host_memory=4 << 30))
    problem = next(p for p in discover_problems(DATA / "problems") if p.id == "tiny_relu")
    key_dir = tmp_path / "key"
    key_dir.mkdir()
    with Worker(Placement(sandbox=policy), role="candidate", device="cpu", timeout_s=60) as worker:
        worker.start(worker_job("candidate", problem, EvalConfig(device="cpu")),
                     LINKED_EXTENSIONS.format(decoy=str(decoy)), problem.source, key_dir)
        worker.reply("load", 60)
        assert (worker.scratch / "ext").is_symlink()
        worker.keep_triton_cache(key_dir)
    assert not os.path.lexists(key_dir / TRITON_CACHE)
