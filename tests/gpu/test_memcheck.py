"""On a CUDA machine, with compute-sanitizer: --memcheck turns a passing kernel that writes one
element past its output (on every call, or on every third) into runtime_error (memory_error),
naming the kernel; correct kernels keep their verdicts, and the one declaring shared memory also
gets racecheck."""

import json
import os

import pytest

from harness.cli import main
from harness.judge.memcheck import find_sanitizer

pytestmark = pytest.mark.gpu

PROBLEM = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(1000, 1000)]  # 4,000,000 bytes: no multiple of any allocation granule
def get_init_inputs():
    return []
"""
CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
kernel = r"""
#include <torch/extension.h>
__global__ void {name}(const float* x, float* out, long n, long limit) {{
{body}
}}
torch::Tensor relu(torch::Tensor x) {{
    static long calls = 0;
    auto out = torch::empty_like(x);
    long n = x.numel();
    long limit = ++calls % 3 == 0 ? n + 1 : n;  // one element past the output on every third call
    {name}<<<(n + 256) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n, limit);
    return out;
}}
"""
ext = load_inline(name="{name}_ext", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=kernel,
                  functions=["relu"])
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
'''
BODIES = {
    "bounded": "    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n"
               "    if (i < n) out[i] = fmaxf(x[i], 0.f);",
    # The classic off-by-one: one float written just past the output, which the caching allocator's
    # rounding hides from every check but the sanitizer's.
    "off_by_one": "    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n"
                  "    if (i <= n) out[i] = fmaxf(x[i < n ? i : n - 1], 0.f);",
    "every_third": "    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n"
                   "    if (i < limit) out[i] = fmaxf(x[i < n ? i : n - 1], 0.f);",
    "tiled": "    __shared__ float tile[256];\n"
             "    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;\n"
             "    tile[threadIdx.x] = i < n ? x[i] : 0.f;\n"
             "    __syncthreads();\n"
             "    if (i < n) out[i] = fmaxf(tile[threadIdx.x], 0.f);",
}


@pytest.fixture(scope="module")
def memchecked(tmp_path_factory):
    if find_sanitizer(dict(os.environ)) is None:
        pytest.skip("no compute-sanitizer here")
    tmp = tmp_path_factory.mktemp("memcheck")
    (tmp / "problems").mkdir()
    (tmp / "problems" / "relu_1000.py").write_text(PROBLEM)
    (tmp / "c" / "relu_1000").mkdir(parents=True)
    for name, body in BODIES.items():
        (tmp / "c" / "relu_1000" / f"{name}.py").write_text(CANDIDATE.format(name=name, body=body))
    assert main(["eval", str(tmp / "c"), "--problems", str(tmp / "problems"), "--out", str(tmp / "out"), "--memcheck",
                 "--device", "cuda", "--trials", "10", "--build-dir", str(tmp / "build"), "--db", str(tmp / "h.db")]) == 0
    results = {r["candidate"].split("/")[1]: r
               for r in map(json.loads, (tmp / "out" / "results.jsonl").read_text().splitlines())}
    return results, json.loads((tmp / "out" / "run.json").read_text())


@pytest.mark.parametrize("name", ["off_by_one", "every_third"])
def test_a_write_past_the_output_is_a_memory_error_in_the_kernel_that_made_it(memchecked, name):
    off = memchecked[0][f"{name}.py"]
    assert off["status"] == "runtime_error" and "memory_error" in off["flags"] and off["phase"] == "memcheck", off
    assert off["error"].startswith(f"compute-sanitizer memcheck in {name}"), off["error"]
    assert "Invalid __global__ write of size 4 bytes" in off["error"], off["error"]
    assert off["speedup"] is None and off["timing"]["median_ms"] > 0  # timed before the pass, as it was


def test_correct_kernels_keep_their_verdicts_and_shared_memory_gets_racecheck_too(memchecked):
    results, run = memchecked
    for name, tools in (("bounded.py", ["memcheck"]), ("tiled.py", ["memcheck", "racecheck"])):
        result = results[name]
        assert result["status"] == "ok" and result["speedup"] > 0, result
        assert [(p["tool"], p["status"]) for p in result["sanitized"]] == [(tool, "clean") for tool in tools], result
    passes = [p["seconds"] for r in results.values() for p in r["sanitized"]]
    assert len(passes) == 5 and 0 < sum(passes) <= run["memcheck_s"], (passes, run["memcheck_s"])
