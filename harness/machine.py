"""What the run executed on, recorded with every run."""

from __future__ import annotations

import platform
import socket
import subprocess

import torch

from . import __version__
from .records import MachineInfo


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def describe_machine(device: str) -> MachineInfo:
    on_gpu = device == "cuda"
    return MachineInfo(
        hostname=socket.gethostname(),
        device=device,
        device_name=torch.cuda.get_device_name() if on_gpu else (platform.processor() or platform.machine()),
        driver=_nvidia_driver() if on_gpu else None,
        cuda=torch.version.cuda,
        torch=torch.__version__,
        python=platform.python_version(),
        harness=__version__,
    )
