"""The CPU's side of the device seam: whether this host lets the harness sample a worker's threads
is a protection a CPU run reports, under every sandbox mode."""

from harness.cpu import sampling
from harness.cpu.device import Cpu
from harness.judge.gpu import Gpu
from harness.records import Limits, SandboxMode
from harness.worker.sandbox import SandboxPolicy

POLICY = SandboxPolicy(mode=SandboxMode.off, limits=Limits(host_memory=1 << 30))


def test_whether_the_host_lets_the_harness_sample_its_workers_is_reported_on_a_cpu_run(monkeypatch):
    """Sampling confines nothing, but without it a CPU run cannot see library work hidden from the
    profiler (cpu/sampling.py): the run says so. A GPU run samples nothing, and says nothing of it."""
    monkeypatch.setattr(sampling, "refused", lambda: "perf_event_open: Permission denied")
    report = Cpu().report(POLICY)
    assert any(line.startswith("sampled_cpu_time: this host does not let the harness sample a worker (perf_event_open: "
                               "Permission denied)") for line in report.missing)
    monkeypatch.setattr(sampling, "refused", lambda: None)
    assert "sampled_cpu_time" in Cpu().report(POLICY).active
    gpu = Gpu().report(POLICY)
    assert not any("sampled_cpu_time" in line for line in gpu.active + gpu.missing)
