"""On a CUDA machine: what a GPU lane's spare does as it boots (child.warm_ahead) readies
Triton's first launch and leaves CUDA alone: no context on any GPU, which the busy-GPU check
counts on (docs/threat-model.md), and nothing written."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

BOOT = """
import os, subprocess, sys
import torch
from harness.worker import child

child.warm_ahead(lambda: False)
from triton.runtime.cache import triton_key
assert triton_key.cache_info().currsize == 1, "Triton's kernel key was not computed"
assert "triton.experimental.gluon.nvidia.hopper" in sys.modules, "the specialization's modules were not imported"
assert not torch.cuda.is_initialized(), "CUDA was initialized"
holders = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.split()
assert str(os.getpid()) not in holders, "the boot holds a CUDA context"
"""


def test_a_spare_readies_tritons_first_launch_without_cuda_or_writes(tmp_path):
    env = os.environ | {"HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    (tmp_path / "home").mkdir()
    booted = subprocess.run([sys.executable, "-c", BOOT], env=env, capture_output=True, text=True, timeout=300)
    assert booted.returncode == 0, booted.stderr[-2000:]
    assert not (tmp_path / "triton-cache").exists() and not any((tmp_path / "home").iterdir())
