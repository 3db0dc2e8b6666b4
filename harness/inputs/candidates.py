"""Discover candidate files and extract the Python answer from each.

Layouts: `candidates/<problem_id>/<name>.{py,txt,md}`, and KernelBench's flat
`level_{L}_problem_{N}_sample_{S}_kernel.py` resolved against a KernelBench-style problems dir.
`.txt`/`.md` files are raw model transcripts: the final Python answer is extracted from them.
Nothing here imports or runs candidate code.
"""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import textwrap
import threading
import tokenize
from dataclasses import dataclass
from pathlib import Path

from ..records import Candidate, CandidateKind, Problem

CANDIDATE_SUFFIXES = (".py", ".txt", ".md")
# Notes kept beside candidates, at any depth, never candidates themselves (a NOTES.md in a problem
# folder had been judged, a load_error counted against the run).
NOT_CANDIDATES = re.compile(r"(readme|notes?|changelog|license|todo|contributing)([._-].*)?", re.IGNORECASE)
KERNELBENCH_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
# A fence line: ``` or ~~~ with an optional info string (the language).
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+.#-]*)[^`]*$")
PYTHON_TAGS = {"python", "py", "python3", "py3"}
MAX_CANDIDATE_BYTES = 4 * 1024 * 1024
CODING_LINE = re.compile(r"coding[:=]\s*[-\w.]+")  # PEP 263's declaration, in a comment of the first two lines


@dataclass(frozen=True)
class CodeBlock:
    language: str  # lower-case info string, "" when untagged
    text: str
    terminated: bool


def split_code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks in order. A tagged fence always opens a block (closing any open one, as
    models often forget to close); a bare fence closes an open block or opens an untagged one;
    a block still open at the end of the text runs to the end."""
    blocks: list[CodeBlock] = []
    language: str | None = None  # None: outside any block
    lines: list[str] = []
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence is None:
            if language is not None:
                lines.append(line)
            continue
        tag = fence.group(2).lower()
        if language is not None:
            blocks.append(CodeBlock(language, _block_text(lines), terminated=not tag))
            language, lines = None, []
            if not tag:
                continue
        language, lines = tag, []
    if language is not None:
        blocks.append(CodeBlock(language, _block_text(lines), terminated=False))
    return blocks


def _block_text(lines: list[str]) -> str:
    """A block's lines, less the indentation they all share (a fence under a Markdown list item
    indents its code too); as they are where they share none."""
    text = "\n".join(lines) + "\n"
    shared = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return textwrap.dedent(text) if shared else text


def _defines_model_new(code: str) -> bool:
    return re.search(r"^\s*class\s+ModelNew\b", code, re.MULTILINE) is not None


def extract_code(text: str) -> tuple[str | None, str | None]:
    """Return (code, None) or (None, why no code could be extracted).

    The answer is the last Python block that defines ModelNew (reasoning comes first, other
    languages may follow); failing that the last Python block, the last untagged block that
    defines ModelNew, or the whole text when it is Python itself."""
    blocks = split_code_blocks(text)
    python_blocks = [b for b in blocks if b.language in PYTHON_TAGS]
    untagged = [b for b in blocks if b.language == "" and _defines_model_new(b.text)]
    for choice in (
        [b for b in python_blocks if _defines_model_new(b.text)],
        python_blocks,
        untagged,
    ):
        if choice:
            return choice[-1].text, None
    if _is_python(text):
        return text, None
    if blocks:
        languages = sorted({b.language or "untagged" for b in blocks})
        return None, f"no Python code block in the transcript (found {len(blocks)} block(s): {', '.join(languages)})"
    return None, "no code found: the file has no fenced code block and is not Python"


def _is_python(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return bool(text.strip())


def classify_kind(code: str) -> CandidateKind:
    """What the code compiles, read from the code itself: a comment that names `load_inline` or
    `@triton.jit` compiles nothing (a red team's comment made PyTorch calls pass as an extension's
    own work, 2026-12-04). CUDA sources are strings, so strings count for them."""
    code = _without_comments(code)
    if re.search(r"^\s*(import triton|from triton)|@triton\.jit", code, re.MULTILINE):
        return CandidateKind.triton
    if re.search(r"cuda_sources\s*=|__global__|#include\s*<cuda", code):
        return CandidateKind.cuda
    if re.search(r"\b(load_inline|cpp_extension)\b", _without_strings(code)):
        return CandidateKind.cpp
    return CandidateKind.python


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    try:
        return list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):  # IndentationError included: it fails at load then
        return None


def _without_comments(code: str) -> str:
    """The code with its comments blanked (tokens keep their places); as it is if it does not tokenize."""
    return _blanked(code, {tokenize.COMMENT})


def _without_strings(code: str) -> str:
    return _blanked(code, {tokenize.STRING, tokenize.COMMENT} | ({tokenize.FSTRING_MIDDLE}
                                                                 if hasattr(tokenize, "FSTRING_MIDDLE") else set()))


def _blanked(code: str, kinds: set[int]) -> str:
    tokens = _tokens(code)
    if tokens is None:
        return code
    lines = code.splitlines(keepends=True)
    for token in tokens:
        if token.type in kinds:
            (first, start), (last, end) = token.start, token.end
            for row in range(first, last + 1):
                line = lines[row - 1]
                begin, stop = (start if row == first else 0), (end if row == last else len(line.rstrip("\r\n")))
                lines[row - 1] = line[:begin] + " " * (stop - begin) + line[stop:]
    return "".join(lines)


def _suffix(path: Path) -> str:
    return path.suffix.lower()  # UPPER.PY is a candidate too


def _decoded(raw: bytes, path: Path) -> str:
    """The file's text: UTF-8, or for a .py file another encoding its coding line declares (PEP
    263), that line then made to say utf-8, as the code is written out again in UTF-8."""
    if _suffix(path) == ".py":
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        except SyntaxError:  # a declaration Python would refuse too: UTF-8 then says where it fails
            encoding = "utf-8"
        if encoding not in ("utf-8", "utf-8-sig"):
            lines = raw.decode(encoding).splitlines(keepends=True)
            return "".join(CODING_LINE.sub("coding: utf-8", line) if index < 2 else line
                           for index, line in enumerate(lines))
    return raw.decode("utf-8")


def read_candidate(path: Path, rel_path: str, problem_id: str | None) -> Candidate:
    try:
        raw = path.read_bytes()
    except OSError as exc:  # a link to nothing, or a file gone or unreadable since it was listed
        raw, unreadable = b"", f"the file cannot be read: {exc.strerror or exc}"
    else:
        unreadable = None
    source_hash = hashlib.sha256(raw).hexdigest()

    def failed(reason: str) -> Candidate:  # not resolved: a link in a loop has nothing to resolve to
        return Candidate(path=os.path.abspath(path), rel_path=rel_path, problem_id=problem_id,
                         source_hash=source_hash, code=None, code_hash=None, extraction_error=reason)

    if unreadable:
        return failed(unreadable)

    if len(raw) > MAX_CANDIDATE_BYTES:
        return failed(f"file is {len(raw)} bytes, over the {MAX_CANDIDATE_BYTES}-byte limit for a candidate")
    if b"\x00" in raw:
        return failed("not a text file (contains NUL bytes)")
    try:
        text = _decoded(raw, path)
    except UnicodeDecodeError as exc:
        return failed(f"not {exc.encoding.upper()} text (bad byte at offset {exc.start})")
    if _suffix(path) == ".py" and (_is_python(text) or not split_code_blocks(text)):
        code, reason = text, None  # a .py file is code, even broken: the import names the error
    else:
        code, reason = extract_code(text)
    if code is None:
        return failed(reason or "no code")
    return Candidate(
        path=str(path.resolve()), rel_path=rel_path, problem_id=problem_id, source_hash=source_hash,
        code=code, code_hash=hashlib.sha256(code.encode()).hexdigest(), kind=classify_kind(code),
    )


def _kernelbench_problem(name: str, problems: list[Problem]) -> str | None:
    match = KERNELBENCH_NAME.match(name)
    if match is None:
        return None
    level, number = int(match.group(1)), int(match.group(2))
    for problem in problems:
        if problem.kernelbench_number == number and problem.kernelbench_level in (level, None):
            return problem.id
    return None


def discover_candidates(root: Path, problems: list[Problem]) -> list[Candidate]:
    """Every candidate file under `root`, each tied to a problem id (or None when it names none)."""
    known = {p.id for p in problems}
    found: list[Candidate] = []
    for path in sorted(root.rglob("*")):
        listed = path.is_file() or (path.is_symlink() and not path.exists())  # a link to nothing: said so
        if not listed or _suffix(path) not in CANDIDATE_SUFFIXES or path.name.startswith((".", "_")) or \
                NOT_CANDIDATES.fullmatch(path.stem):
            continue
        rel = path.relative_to(root)
        if len(rel.parts) == 1 and _suffix(path) != ".py":
            continue  # notes beside the problem folders
        if len(rel.parts) == 1:
            problem_id = _kernelbench_problem(path.name, problems)
        else:
            problem_id = rel.parts[0] if rel.parts[0] in known else None
        found.append(read_candidate(path, rel.as_posix(), problem_id))
    return found


def write_candidate(code: str, problem_id: str, root: Path) -> Candidate:
    """An in-memory answer (code, or a transcript) as an ordinary candidate file under `root`,
    named by its content, so the same answer twice is the same candidate."""
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    path = root / problem_id / f"{digest}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():  # written whole, then renamed: a thread submitting the same answer never reads half
        partial = path.with_name(f".{digest}.{threading.get_ident()}.partial")
        partial.write_text(code, encoding="utf-8")
        os.replace(partial, path)
    return read_candidate(path, f"{problem_id}/{path.name}", problem_id)
