"""A candidate's worker runs with the memory tunables both sides of a CPU run get (parent.MALLOC_TUNABLES,
parent.REUSED_MEMORY_TUNABLES): seen from inside the worker."""

import harness
from harness.worker.parent import MALLOC_TUNABLES, REUSED_MEMORY_TUNABLES
from tests.support import DATA

PROBLEMS = DATA / "problems"


def test_the_candidates_worker_runs_with_the_tunables(build_dir, tmp_path):
    """Seen from inside: a candidate that refuses to load without them loads (the reference's
    worker is started the same way)."""
    code = ("import os, torch, torch.nn as nn\n"
            "tunables = os.environ.get('GLIBC_TUNABLES', '')\n"
            f"assert set({(MALLOC_TUNABLES + ':' + REUSED_MEMORY_TUNABLES).split(':')!r}) <= set(tunables.split(':')), "
            "tunables\n"
            "class ModelNew(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return torch.clamp(x, min=0)\n")
    [result] = harness.evaluate([(code, "tiny_relu")], PROBLEMS, device="cpu", trials=3, timeout_s=20,
                                build_dir=build_dir, db=tmp_path / "h.db")
    assert result.status is harness.Status.ok, result.error
