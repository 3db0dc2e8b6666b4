"""Compiler output read as data: gcc/clang, nvcc, ptxas and linker errors, each located in the
generated source and traced back to a line of the candidate file."""

from __future__ import annotations

import re
from pathlib import Path

from ..records import CompilerDiagnostic

GCC_STYLE = re.compile(r"^(?P<path>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
                       r"(?P<sev>fatal error|error|warning):\s*(?P<msg>.+)$")
NVCC_STYLE = re.compile(r"^(?P<path>\S+?)\((?P<line>\d+)\):\s*(?P<sev>error|warning)(?:\s*#[\w-]+(?:-D)?)?:\s*(?P<msg>.+)$")
UNLOCATED = re.compile(r"^(?:ptxas\s+)?(?P<sev>fatal error|error|fatal)\s*:\s*(?P<msg>.+)$", re.IGNORECASE)
UNDEFINED_REFERENCE = re.compile(r"undefined reference to .+")
# Not the compiler's: build-tool summaries, and log lines of C++ libraries, which name their
# source as "File.cpp:48]" (torch's, in a build worker that sees no GPU: "gpuGetDeviceCount failed").
NOISE = re.compile(r"ninja: build stopped|collect2: error|Error building extension|error: command|"
                   r"subprocess\.CalledProcessError|RuntimeError: Error|\w\.(?:cpp|cc|h):\d+\]", re.IGNORECASE)
BUILD_FAILURE = re.compile(r"Error (building|compiling objects for) extension")
OWN_SOURCES = re.compile(r"^(main\.cpp|cuda\.cu|.*\.(cu|cpp|cc|cuh))$")
# A compiler, assembler or linker stopped by a signal or a resource limit (gcc: "Killed signal
# terminated program cc1plus", "File size limit exceeded signal terminated program"; nvcc: "'cicc'
# died due to signal 9"; a shell: "Killed", "File size limit exceeded"): not what the code makes
# of the toolchain. Without namespaces a red team had set a rival's compiler RLIMIT_FSIZE to 0, and
# its compile_error was cached as the honest candidate's (2026-12-07).
TOOL_STOPPED = re.compile(r"signal terminated program|died due to signal|\bKilled\b|File size limit exceeded|"
                          r"CPU time limit exceeded|Segmentation fault|Bus error", re.IGNORECASE)
MAX_MESSAGE = 300


def tool_stopped(log: str) -> bool:
    """Whether a build's log shows one of its tools stopped by a signal or a limit (TOOL_STOPPED)."""
    return TOOL_STOPPED.search(log) is not None


def is_build_failure(exc_type: str, message: str) -> bool:
    """What torch.utils.cpp_extension raises when the compiler or linker fails."""
    return exc_type == "RuntimeError" and BUILD_FAILURE.search(message) is not None


def _diagnostic(line: str) -> CompilerDiagnostic | None:
    for pattern in (GCC_STYLE, NVCC_STYLE):
        match = pattern.match(line)
        if match:
            path = match.group("path")
            name = Path(path).name
            return CompilerDiagnostic(
                severity=match.group("sev"), message=match.group("msg").strip()[:MAX_MESSAGE], file=name,
                line=int(match.group("line")), column=int(match.group("col")) if match.groupdict().get("col") else None,
                in_candidate="/include/" not in path and OWN_SOURCES.match(name) is not None,
            )
    match = UNLOCATED.match(line.strip())
    if match:
        severity = "error" if match.group("sev").lower() == "fatal" else match.group("sev").lower()
        return CompilerDiagnostic(severity=severity, message=match.group("msg").strip()[:MAX_MESSAGE])
    match = UNDEFINED_REFERENCE.search(line)
    if match:
        return CompilerDiagnostic(severity="error", message=match.group(0)[:MAX_MESSAGE])
    return None


def parse_compiler_output(log: str) -> list[CompilerDiagnostic]:
    """Errors from gcc/clang, nvcc, ptxas and the linker, in the order a reader should see them:
    those in the candidate's own sources first (in log order), then header errors (often a
    consequence, e.g. of a too-old -std), then unlocated ones. Warnings are left out."""
    found: list[CompilerDiagnostic] = []
    seen = set()
    for line in log.splitlines():
        if NOISE.search(line):
            continue
        diagnostic = _diagnostic(line.rstrip())
        if diagnostic is None or diagnostic.severity == "warning":
            continue
        key = (diagnostic.file, diagnostic.line, diagnostic.message)
        if key not in seen:
            seen.add(key)
            found.append(diagnostic)
    # cuda.cu and main.cpp compile in parallel, so the log's order between them is chance: the
    # kernel source first, then the binding, each in its compiler's order.
    rank = lambda d: (0, d.file != "cuda.cu") if d.in_candidate else (1 if d.file else 2, False)  # noqa: E731
    return sorted(found, key=rank)  # stable: log order within each rank


def locate_in_candidate(diagnostics: list[CompilerDiagnostic], sources: dict[str, list[str]],
                        candidate_text: str) -> list[CompilerDiagnostic]:
    """Fill candidate_line: the line of the candidate file holding the same text as the
    generated source line (with the next line as a tie-breaker when the text repeats)."""
    lines = [line.strip() for line in candidate_text.splitlines()]
    located = []
    for diagnostic in diagnostics:
        generated = sources.get(diagnostic.file or "")
        if diagnostic.in_candidate and generated and diagnostic.line and diagnostic.line <= len(generated):
            wanted = generated[diagnostic.line - 1].strip()
            following = generated[diagnostic.line].strip() if diagnostic.line < len(generated) else None
            matches = [i for i, text in enumerate(lines) if text == wanted and len(wanted) > 2]
            best = [i for i in matches if following is None or (i + 1 < len(lines) and lines[i + 1] == following)]
            if best or matches:
                diagnostic = diagnostic.model_copy(update={"candidate_line": (best or matches)[0] + 1})
        located.append(diagnostic)
    return located


def read_compiler_errors(message: str, log: str, candidate_text: str,
                         sources: dict[str, str]) -> list[CompilerDiagnostic]:
    """The diagnostics of a failed build: from the exception and the build log (verbose builds
    print the compiler's output instead of attaching it), located in the candidate file through
    the generated `sources` the worker read."""
    lines = {name: text.splitlines() for name, text in sources.items()}
    return locate_in_candidate(parse_compiler_output(message + "\n" + log), lines, candidate_text)
