"""Workers' CPU memory: large tensors backed by huge pages, so a kernel's timed calls are not
dominated by faulting in its outputs' 4 KB pages afresh on every call (parent.MALLOC_TUNABLES);
and in a CPU run's evaluation workers a freed output's memory serves the next call's, already
faulted in, so making outputs' memory ready off the clock gains a candidate nothing
(parent.REUSED_MEMORY_TUNABLES)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.worker.parent import MALLOC_TUNABLES, REUSED_MEMORY_TUNABLES
from tests.support import DATA

PROBLEMS = DATA / "problems"

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_PAGE = Path("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
OUTPUT_FLOATS = 64 << 20  # 256 MB, a relu's output on the CPU problems
PAGES_4K = OUTPUT_FLOATS * 4 // 4096

TUNING = ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE")  # glibc's, and torch's own switch to huge pages
FAULTS_PER_OUTPUT = f"""
import resource, torch
x = torch.ones({OUTPUT_FLOATS})
faults = []
for _ in range(4):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = torch.relu(x)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del y
print(*faults[1:])
"""


def faults_per_output(env: dict[str, str]) -> list[int]:
    """Page faults of each call after the first."""
    done = subprocess.run([sys.executable, "-c", FAULTS_PER_OUTPUT], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k not in TUNING} | env)
    assert done.returncode == 0, done.stderr
    return [int(count) for count in done.stdout.split()]


def glibc_version() -> tuple[int, ...]:
    name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    return tuple(int(part) for part in version.split(".")) if name == "glibc" else ()


@pytest.mark.skipif(not THP.exists() or "[madvise]" not in THP.read_text(),
                    reason="the tunable decides only where transparent huge pages are madvise-only")
@pytest.mark.skipif(glibc_version() < (2, 35), reason="glibc.malloc.hugetlb needs glibc 2.35")
@pytest.mark.skipif(os.sysconf("SC_PAGE_SIZE") != 4096 or not HUGE_PAGE.exists()
                    or HUGE_PAGE.read_text().strip() != str(2 << 20),
                    reason="counted for 4 KB pages and 2 MB huge ones")
def test_a_large_output_faults_in_huge_pages_not_4kb_ones():
    plain, tuned = min(faults_per_output({})), min(faults_per_output({"GLIBC_TUNABLES": MALLOC_TUNABLES}))
    assert plain >= PAGES_4K  # every call maps its output afresh: one fault per 4 KB page
    assert tuned < plain // 16, (plain, tuned)  # 129 here; room for 4 KB fallbacks


@pytest.mark.skipif(glibc_version() < (2, 26), reason="glibc's malloc tunables need glibc 2.26")
def test_a_large_output_reuses_the_memory_the_last_one_freed():
    """Faulted in once, at the first call; the fresh output of every later call is the memory the
    last one freed (with mmap alone switched off, the heap grew by a whole output every call)."""
    both = f"{MALLOC_TUNABLES}:{REUSED_MEMORY_TUNABLES}"
    without_bins = both.replace(":glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0", "")
    assert max(faults_per_output({"GLIBC_TUNABLES": both})) < 16
    assert max(faults_per_output({"GLIBC_TUNABLES": without_bins})) >= PAGES_4K // 512
