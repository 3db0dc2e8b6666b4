"""A worker that sees the GPU, while it boots ahead of its candidate."""

import os
import shutil
import subprocess
import time

import pytest

from harness.worker.parent import Placement, Worker
from harness.worker.processes import descendants

pytestmark = pytest.mark.gpu
BOOT_S = 120


def gpu_context_pids() -> set[int]:
    listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                            capture_output=True, text=True, check=True).stdout
    return {int(pid) for pid in listed.split()}


def test_a_booting_worker_readies_triton_without_a_context_on_the_gpu():
    """Triton's driver module and a first kernel are compiled in the worker's own scratch dir as it
    boots, and no CUDA context is made before it has a candidate (another may be timed on that GPU)."""
    pytest.importorskip("triton")
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi lists GPU contexts")
    env = {"PATH": os.environ["PATH"], "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}
    with Worker(Placement(gpu=0, env=env), role="worker", device="cuda", timeout_s=BOOT_S) as worker:
        deadline = time.monotonic() + BOOT_S
        while not (list(worker.scratch.glob(".triton/cache/*/cuda_utils*.so"))
                   and list(worker.scratch.glob(".triton/cache/*/copy.cubin"))):
            assert time.monotonic() < deadline, "no Triton driver module or kernel in the worker's scratch dir"
            time.sleep(0.2)
        time.sleep(1)  # past the module's load
        tree = {worker.pid, *descendants(worker.pid)}
        assert not tree & gpu_context_pids()
