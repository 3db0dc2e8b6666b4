"""Diagnoses: the cause of a failed verdict, in one line, with a hint that fixes it.

Each detector looks at the finished result (verdict, reason, evidence, compiler diagnostics,
flags) and the candidate's code, and names one cause from a fixed taxonomy. The first detector
that matches gives the diagnosis; any others that also match are listed as other causes, since
one answer often makes several mistakes (seed 001 misses a declaration and uses an API that does
not exist). Nothing here runs candidate code.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..records import CandidateKind, Diagnosis, Result, SanitizerStatus, Status
from .checking import Check, common
from .verdicts import HARNESS_FAILED

# Known APIs that models call under the wrong name, with what to use instead.
API_REPLACEMENTS = {
    "torch::cuda::getCurrentCUDAStream": "at::cuda::getCurrentCUDAStream() (#include <ATen/cuda/CUDAContext.h>)",
    "at::cuda::getCurrentCUDAStream": "#include <ATen/cuda/CUDAContext.h> for at::cuda::getCurrentCUDAStream()",
    "torch::cuda::getDefaultCUDAStream": "at::cuda::getDefaultCUDAStream() (#include <ATen/cuda/CUDAContext.h>)",
}
IMPORTS = {
    "torch": "import torch", "nn": "import torch.nn as nn", "F": "import torch.nn.functional as F",
    "load_inline": "from torch.utils.cpp_extension import load_inline", "math": "import math",
    "triton": "import triton", "tl": "import triton.language as tl", "np": "import numpy as np",
}
LAUNCH_CHECKS = re.compile(r"cudaGetLastError|cudaPeekAtLastError|C10_CUDA_KERNEL_LAUNCH_CHECK|C10_CUDA_CHECK")
LAUNCH_CHECK_HEADER = "#include <c10/cuda/CUDAException.h>"
GARBAGE_ERROR = 1.0  # a wrong output this far off (or NaN) looks like memory no kernel wrote
# How to act on the ways of being caught that no check raises (judge/verdicts.py gives the flag);
# each check gives its own (`Check.hint`).
VERDICT_HINTS = {
    "not_plain_tensor": "return plain torch.Tensor outputs (not a subclass, a lazy wrapper or another type)",
    "tampered_results": "write only inside your own working directory; the harness's results are not yours",
    "busy_while_stopped": "leave no GPU work running once forward has returned (no kernels queued on a stream "
                          "of your own, no thread launching more): it would slow the harness's own measurements",
}


@dataclass(frozen=True)
class Evidence:
    """What the detectors read: the result and the code it came from."""

    result: Result
    code: str

    @property
    def text(self) -> str:
        return "\n".join([self.result.error or "", *self.result.evidence])

    def compiler_lines(self, pattern: str) -> list[str]:
        return [d.one_line() for d in self.result.compiler_diagnostics if re.search(pattern, d.message)]


@dataclass(frozen=True)
class Found:
    summary: str
    hint: str
    evidence: list[str]


Detector = Callable[[Evidence], Found | None]
DETECTORS: list[tuple[str, Detector]] = []


CRASH_SIGNAL = re.compile(r"killed by SIG(SEGV|BUS|ILL|FPE|ABRT)\b")  # what faulting code dies of (not SIGKILL)
RESOURCE_LIMIT = re.compile(r"--max-[a-z-]+|over the limit of|file size limit|message over")


def detector(category: str):
    def register(fn: Detector) -> Detector:
        DETECTORS.append((category, fn))
        return fn
    return register


def _bound_functions(code: str) -> list[str]:
    """Names in every functions=[...] list of the code (load_inline's bound functions)."""
    lists = re.findall(r"functions\s*=\s*\[([^\]]*)\]", code)
    return [name for found in lists for name in re.findall(r"['\"](\w+)['\"]", found)]


@detector("no_code")
def _no_code(e: Evidence) -> Found | None:
    if e.result.phase == "extract" and e.result.status is Status.load_error:
        return Found("no Python answer could be extracted from the file", "answer with one ```python block that "
                     "defines class ModelNew (the harness takes the last one)", [e.result.error or ""])
    return None


@detector("cxx_standard")
def _cxx_standard(e: Evidence) -> Found | None:
    if e.result.status is not Status.compile_error:
        return None
    flags = re.findall(r"-std=(?:c|gnu)\+\+(?:98|03|0x|11|14|1y)\b", e.code)
    needs_17 = e.compiler_lines(r"constexpr|C\+\+17|c\+\+17|std=c\+\+1[47]")
    if flags:
        return Found(f"builds with {flags[0]}, but torch's headers need C++17", f"remove {flags[0]} from "
                     "extra_cflags/extra_cuda_cflags (torch passes -std=c++17 itself)", needs_17[:3] or flags[:1])
    return None


@detector("nonexistent_api")
def _nonexistent_api(e: Evidence) -> Found | None:
    for diagnostic in e.result.compiler_diagnostics:
        match = (re.search(r'namespace "([\w:]+)" has no member "(\w+)"', diagnostic.message)
                 or re.search(r"[‘'](\w+)[’'] is not a member of [‘']([\w:]+)[’']", diagnostic.message))
        if match:
            scope, name = match.groups() if "namespace" in match.re.pattern else match.groups()[::-1]
            api = f"{scope}::{name}"
            instead = API_REPLACEMENTS.get(api, "the API this torch version has (see its C++ docs)")
            return Found(f"{api} does not exist in this torch", f"use {instead} instead of {api}",
                         [diagnostic.one_line()])
    return None


@detector("missing_declaration")
def _missing_declaration(e: Evidence) -> Found | None:
    for name in _bound_functions(e.code):
        lines = [d.one_line() for d in e.result.compiler_diagnostics
                 if d.file == "main.cpp" and re.search(rf"[‘'\"]{name}[’'\"] (was not declared|is undefined)|identifier \"{name}\" is undefined", d.message)]
        if lines:
            return Found(f"{name} is bound in functions=[...] but not declared in cpp_sources",
                         f"put its C++ declaration (e.g. `torch::Tensor {name}(torch::Tensor x, ...);`) in cpp_sources: "
                         "load_inline generates the Python binding from cpp_sources only", lines)
    return None


@detector("extern_c_linkage")
def _extern_c(e: Evidence) -> Found | None:
    if "undefined symbol" in e.text and re.search(r'extern\s+"C"', e.code):
        return Found("the CUDA source defines the function extern \"C\", the C++ declaration expects C++ linkage",
                     "remove extern \"C\" from the definition in cuda_sources (or declare it extern \"C\" in "
                     "cpp_sources too)", [e.result.error or ""])
    return None


@detector("launch_config")
def _launch_config(e: Evidence) -> Found | None:
    pattern = r"invalid configuration argument|too many resources requested|uses too much shared data|" \
              r"invalid argument.*launch|kernel launch failed \([^)]*\)|exceeds.*shared memory"
    match = re.search(pattern, e.text, re.IGNORECASE)
    if match:
        return Found(f"a kernel launch configuration is invalid ({match.group(0)})",
                     "keep blockDim.x*y*z <= 1024, gridDim.y and .z <= 65535, and dynamic shared memory <= 48 KB "
                     "(more only after cudaFuncSetAttribute)", [e.result.error or ""])
    return None


@detector("memory_error")
def _memory_error(e: Evidence) -> Found | None:
    if "memory_error" not in e.result.flags:
        return None
    if any(one.tool == "racecheck" and one.status is SanitizerStatus.errors for one in e.result.sanitized):
        return Found("threads of a block raced on shared memory (compute-sanitizer racecheck)",
                     "put __syncthreads() between one thread's write to shared memory and another's read of it "
                     "(and before a tile is overwritten); the racing accesses' lines: compute-sanitizer --tool "
                     f"racecheck python -m harness eval {e.result.candidate} --sandbox off", [e.result.error or ""])
    command = (f"compute-sanitizer --tool memcheck python -m harness eval {e.result.candidate} "
               "--sandbox off --correctness-trials 1")
    return Found("a kernel read or wrote device memory it does not own", "check every index against the tensor's "
                 "size (guard `if (i < n)`, the last partial block, strides of non-contiguous inputs); find the "
                 f"kernel and the access with: {command}", [e.result.error or ""])


@detector("missing_header")
def _missing_header(e: Evidence) -> Found | None:
    lines = e.compiler_lines(r"C10_CUDA_KERNEL_LAUNCH_CHECK|C10_CUDA_CHECK")
    if e.result.status is Status.compile_error and lines:
        return Found("C10_CUDA_KERNEL_LAUNCH_CHECK is used without its header",
                     f"add {LAUNCH_CHECK_HEADER} to the CUDA source", lines)
    return None


@detector("module_called")
def _module_called(e: Evidence) -> Found | None:
    if "'module' object is not callable" in e.text:
        functions = _bound_functions(e.code)
        call = f"ext.{functions[0]}(...)" if functions else "ext.<function>(...)"
        return Found("forward calls the compiled extension module itself instead of its function",
                     f"call the bound function, e.g. {call}, not ext(...)", [e.result.error or ""])
    return None


@detector("none_for_tensor")
def _none_for_tensor(e: Evidence) -> Found | None:
    if "incompatible function arguments" in e.text and re.search(r"\bNone\b", e.text):
        return Found("None was passed where the binding takes a Tensor (often a missing bias)",
                     "pass a real tensor, or declare the parameter c10::optional<torch::Tensor> and test has_value()",
                     [e.result.error or ""])
    return None


@detector("binding_arguments")
def _binding_arguments(e: Evidence) -> Found | None:
    if "incompatible function arguments" in e.text:
        return Found("forward passes arguments the compiled function's signature does not take",
                     "pass exactly the types the C++ signature lists in the error (tensors as torch.Tensor, "
                     "int64_t as int, double as float, in that order)", [e.result.error or ""])
    return None


@detector("model_attribute")
def _model_attribute(e: Evidence) -> Found | None:
    match = re.search(r"'ModelNew' object has no attribute '(\w+)'", e.text)
    if match:
        return Found(f"ModelNew has no attribute {match.group(1)}",
                     f"set self.{match.group(1)} in ModelNew.__init__ (after super().__init__()) before forward "
                     "uses it", [e.result.error or ""])
    return None


@detector("triton_compile")
def _triton_compile(e: Evidence) -> Found | None:
    if re.search(r"CompilationError|triton\.compiler", e.text):
        return Found("the Triton kernel does not compile", "fix the line the error points at: block sizes must be "
                     "tl.constexpr, tl.arange bounds powers of two, and only tl.* operations inside @triton.jit",
                     [e.result.error or ""])
    return None


@detector("truncated_answer")
def _truncated(e: Evidence) -> Found | None:
    if e.result.status is Status.load_error and re.search(
            r"was never closed|unexpected EOF|EOF while scanning|unterminated (triple-quoted )?string", e.text):
        return Found("the answer is cut off mid-code", "regenerate with a larger output budget; the last code "
                     "block ends before the code does", [e.result.error or ""])
    return None


@detector("syntax_error")
def _syntax(e: Evidence) -> Found | None:
    if e.result.status is Status.load_error and re.search(r"SyntaxError|IndentationError|TabError", e.text):
        return Found("the code is not valid Python", "fix the syntax error at the line the reason names",
                     [e.result.error or ""])
    return None


@detector("no_model_new")
def _no_model_new(e: Evidence) -> Found | None:
    if "defines no ModelNew" in e.text:
        return Found("the code defines no ModelNew class", "define class ModelNew(nn.Module) with the reference "
                     "Model's constructor and forward signature", [e.result.error or ""])
    return None


@detector("missing_import")
def _missing_import(e: Evidence) -> Found | None:
    match = re.search(r"name '(\w+)' is not defined|No module named '([\w.]+)'", e.text)
    if match and e.result.status in (Status.load_error, Status.runtime_error):
        name = match.group(1) or match.group(2)
        fix = IMPORTS.get(name, f"import {name}") if match.group(1) else f"install {name} or avoid it"
        return Found(f"{name} is used but never imported" if match.group(1) else f"module {name} is not installed",
                     f"add `{fix}` at the top" if match.group(1) else fix, [e.result.error or ""])
    return None


@detector("init_differs")
def _init_differs(e: Evidence) -> Found | None:
    if e.result.status is Status.mismatch and "init_differs" in e.result.flags:
        return Found("its parameters differ from the reference's after the same seed",
                     "create parameters exactly as the reference does (same modules, shapes and order, e.g. keep "
                     "nn.Conv2d(...) and use its .weight) so equal seeds give equal weights", [e.result.error or ""])
    return None


@detector("ignored_ctor_args")
def _ignored_ctor_args(e: Evidence) -> Found | None:
    if e.result.status not in (Status.mismatch, Status.runtime_error):
        return None
    unused = unused_init_arguments(e.code)
    if unused:
        return Found(f"ModelNew.__init__ ignores {', '.join(unused)}",
                     f"use {', '.join(unused)} from the constructor instead of hard-coding them (other problem "
                     "sizes and configurations pass other values)", [f"unused constructor arguments: {', '.join(unused)}"])
    return None


@detector("near_miss")
def _near_miss(e: Evidence) -> Found | None:
    error = e.result.max_abs_err
    if e.result.status is not Status.mismatch or "near_miss" not in e.result.flags or error is None:
        return None
    passes_at = float(f"{error:.0e}") if float(f"{error:.0e}") >= error else float(f"{error * 1.5:.0e}")
    return Found(f"close to right: largest error {error:.3g}, within 100x of the tolerance",
                 f"it would pass at --atol {passes_at:g} --rtol {passes_at:g}; look at accumulation order and "
                 "precision (accumulate in fp32, avoid fast-math intrinsics such as __expf, TF32 or fp16 "
                 "intermediates)", [e.result.error or ""])


@detector("unchecked_launch")
def _unchecked_launch(e: Evidence) -> Found | None:
    error = e.result.max_abs_err
    # NaN or Inf where the reference is finite: the error line says so (the error is recorded as none).
    garbage = (error is not None and (not math.isfinite(error) or error >= GARBAGE_ERROR)) or \
        "NaN/Inf values" in (e.result.error or "")
    if e.result.status is Status.mismatch and garbage and "<<<" in e.code and not LAUNCH_CHECKS.search(e.code):
        return Found("kernels are launched without checking for launch errors, and the output is garbage",
                     f"add C10_CUDA_KERNEL_LAUNCH_CHECK() ({LAUNCH_CHECK_HEADER}) after each launch: a launch "
                     "that fails leaves the output uninitialised", [e.result.error or ""])
    return None


@detector("harness_error")
def _harness_error(e: Evidence) -> Found | None:
    if e.result.status is Status.crash and (e.result.error or "").startswith(HARNESS_FAILED):
        return Found(e.result.error, "a bug in the harness, not in the candidate: report it with this result's "
                     "evidence (the harness's traceback)", e.result.evidence[-6:])
    return None


@detector("resource_limit")
def _resource_limit(e: Evidence) -> Found | None:
    error = e.result.error or ""
    if e.result.status is Status.crash and RESOURCE_LIMIT.search(error):
        return Found(error, "it passed a limit the run sets on every worker (the reason names it): use less, or "
                     "raise that limit for the run", [error])
    return None


@detector("exited")
def _exited(e: Evidence) -> Found | None:
    error = e.result.error or ""
    if e.result.status is Status.crash and "exited with code" in error:
        return Found(error, "its process ended itself (os._exit, or exit() from compiled code): return from "
                     "forward, or raise an exception, instead", [error])
    return None


@detector("native_crash")
def _native_crash(e: Evidence) -> Found | None:
    """On the CPU: a signal from its compiled code (compute-sanitizer, the fallback's hint, is for GPU kernels)."""
    error = e.result.error or ""
    compiled = e.result.kind in (CandidateKind.cpp, CandidateKind.cuda)
    if e.result.status is Status.crash and e.result.gpu is None and compiled and CRASH_SIGNAL.search(error):
        return Found(error, "its compiled code crashed: look for out-of-bounds accesses and null pointers; rebuild "
                     "with extra_cflags=['-g', '-fsanitize=address'] and call it on the problem's inputs outside "
                     "the harness", [error])
    return None


def rejections(checks: Sequence[Check]) -> list[tuple[str, Detector]]:
    """One cause per way of being caught, named after its flag: how to act on it is the hint of the
    check that raises it (`checks`), or the verdicts' own."""
    hints = {check.flag: check.hint for check in reversed(checks) if check.flag and check.hint} | VERDICT_HINTS

    def caught(flag: str, hint: str) -> Detector:
        def detect(e: Evidence) -> Found | None:
            if e.result.status is Status.rejected and flag in e.result.flags:
                return Found(e.result.error or flag, hint, [e.result.error or "", *e.result.evidence[:3]])
            return None
        return detect

    return [(flag, caught(flag, hint)) for flag, hint in hints.items()]


def unused_init_arguments(code: str) -> list[str]:
    """Constructor parameters of ModelNew that its __init__ never reads."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    params = [a.arg for a in item.args.args[1:] + item.args.kwonlyargs]
                    read = {n.id for n in ast.walk(item) if isinstance(n, ast.Name)}
                    return [p for p in params if p not in read]
    return []


# What to say when no specific cause matched: the verdict's own meaning and a general hint.
FALLBACKS = {
    Status.compile_error: ("compile_error_other", "fix the first compiler error in the candidate's own source"),
    Status.load_error: ("import_error_other", "fix the import error the reason names"),
    Status.runtime_error: ("runtime_error_other", "fix the exception the reason names"),
    Status.mismatch: ("wrong_output", "compare against the reference on small inputs; check indexing, strides "
                                      "and accumulation"),
    Status.timeout: ("timeout", "look for an infinite loop, a deadlock, or a kernel far slower than the reference"),
    Status.crash: ("crash", "look for out-of-bounds memory access (run under compute-sanitizer) or a null pointer"),
    Status.rejected: ("rejected", "return plain torch.Tensor outputs computed by your own kernels"),
}


def diagnose(result: Result, code: str | None, checks: Sequence[Check] | None = None) -> Diagnosis | None:
    """The cause of a failed or rejected verdict; None for ok and skipped. `checks`: those whose
    hints say how to act on a rejection (every device's by default, judge/checking.py)."""
    if result.status in (Status.ok, Status.skipped):
        return None
    evidence = Evidence(result=result, code=code or "")
    detectors = [*DETECTORS, *rejections(common() if checks is None else checks)]
    found = [(category, hit) for category, fn in detectors if (hit := fn(evidence)) is not None]
    if found:
        (category, hit), others = found[0], [c for c, _ in found[1:]]
        return Diagnosis(category=category, summary=hit.summary, hint=hit.hint,
                         evidence=[line for line in hit.evidence if line][:6], other_causes=others)
    category, hint = FALLBACKS[result.status]
    return Diagnosis(category=category, summary=result.error or result.status.value, hint=hint,
                     evidence=result.evidence[:6])
