"""Candidate discovery and extraction of the final Python answer from transcripts."""


from harness.inputs.candidates import classify_kind, discover_candidates, extract_code, read_candidate, split_code_blocks
from harness.inputs.problems import discover_problems
from harness.records import CandidateKind

from tests.support import DATA, REPO


def test_last_python_block_defining_model_new_wins_over_drafts_and_later_shell_blocks():
    text = (DATA / "candidates" / "tiny_relu" / "transcript.md").read_text()
    code, error = extract_code(text)
    assert error is None
    assert "x.abs()" in code and "superseded" not in code and "run.py" not in code


def test_unterminated_fence_runs_to_the_end():
    code, _ = extract_code("reasoning\n```python\nclass ModelNew:\n    pass\n")
    assert code == "class ModelNew:\n    pass\n"


def test_a_tagged_fence_opens_a_new_block_even_inside_an_open_one():
    # As in seed 003: a stray bare fence opens a block, then ```python starts the real answer.
    text = "```\nnot code\n```python\nclass ModelNew:\n    pass\n```\n```cpp\n// none\n```\n"
    blocks = split_code_blocks(text)
    assert [b.language for b in blocks] == ["", "python", "cpp"]
    code, _ = extract_code(text)
    assert code.startswith("class ModelNew")


def test_no_python_block_is_explained():
    code, error = extract_code("here is C++\n```cpp\nint main() {}\n```\n")
    assert code is None and "no Python code block" in error and "cpp" in error
    code, error = extract_code("just prose, no code at all")
    assert code is None and "no fenced code block" in error


def test_plain_python_file_is_taken_whole():
    candidate = read_candidate(DATA / "candidates" / "tiny_relu" / "mismatch.py", "tiny_relu/mismatch.py", "tiny_relu")
    assert candidate.code.startswith("import torch.nn")
    assert candidate.code_hash and candidate.kind is CandidateKind.python


def test_a_python_file_in_the_encoding_its_coding_line_declares_is_read_so(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes("# -*- coding: latin-1 -*-\nNAME = 'caf\xe9'\n".encode("latin-1"))
    code = read_candidate(path, "p/latin.py", "p").code
    assert code == "# -*- coding: utf-8 -*-\nNAME = 'caf\xe9'\n"  # written out again in UTF-8, and said so
    path.write_bytes(b"NAME = '\xff'\n")  # no declaration: UTF-8, which it is not
    assert read_candidate(path, "p/latin.py", "p").extraction_error == "not UTF-8 text (bad byte at offset 8)"


def test_a_block_under_a_list_item_loses_the_indentation_its_lines_share():
    text = "1. The answer:\n\n   ```python\n   import torch\n   class ModelNew:\n       pass\n   ```\n"
    assert extract_code(text) == ("import torch\nclass ModelNew:\n    pass\n", None)


def test_binary_files_are_refused_with_a_reason():
    candidate = read_candidate(DATA / "candidates" / "tiny_relu" / "binary.txt", "x", "tiny_relu")
    assert candidate.code is None and "not a text file" in candidate.extraction_error


def test_kinds():
    assert classify_kind("import triton\n@triton.jit\ndef k(): pass") is CandidateKind.triton
    assert classify_kind("load_inline(name='a', cpp_sources=s, cuda_sources=c)") is CandidateKind.cuda
    assert classify_kind("load_inline(name='a', cpp_sources=s)") is CandidateKind.cpp
    assert classify_kind("import torch") is CandidateKind.python
    # What compiles is read from code, not comments (nor, for C++, strings): a red team's comment
    # had made PyTorch calls pass as an extension's own work.
    assert classify_kind("import torch  # built with load_inline\n# @triton.jit\n") is CandidateKind.python
    assert classify_kind('name = "cpp_extension"\nsrc = """\nload_inline\n"""\n') is CandidateKind.python
    assert classify_kind("from torch.utils.cpp_extension import load\nload(name='a', sources=['a.cpp'])") \
        is CandidateKind.cpp
    assert classify_kind('src = r"""\n__global__ void k() {}\n"""\nload_inline("k", "", cuda_sources=src)') \
        is CandidateKind.cuda
    assert classify_kind("def broken(:\n    load_inline(x)") is CandidateKind.cpp  # untokenizable: as written
    assert not CandidateKind.cuda.runs_on("cpu") and CandidateKind.cpp.runs_on("cpu")
    assert not CandidateKind.cpp.runs_on("cuda") and CandidateKind.python.runs_on("cuda")


def test_shipped_seeds_extract_to_a_model_new():
    seeds = sorted((REPO / "candidates").rglob("0*_*.txt"))
    assert len(seeds) == 5
    for seed in seeds:
        candidate = read_candidate(seed, seed.name, None)
        assert "class ModelNew" in candidate.code, seed.name
        assert candidate.kind is CandidateKind.cuda


def test_discovery_ties_folders_and_kernelbench_names_to_problems(tmp_path):
    level = tmp_path / "level1"
    level.mkdir()
    (level / "19_ReLU.py").write_text((REPO / "problems" / "relu.py").read_text())
    cands = tmp_path / "cands"
    (cands / "19_ReLU").mkdir(parents=True)
    (cands / "19_ReLU" / "a.py").write_text("class ModelNew: pass\n")
    (cands / "level_1_problem_19_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    (cands / "level_1_problem_99_sample_0_kernel.py").write_text("class ModelNew: pass\n")
    (cands / "README.md").write_text("notes, not a candidate")
    found = {c.rel_path: c.problem_id for c in discover_candidates(cands, discover_problems(level))}
    assert found == {
        "19_ReLU/a.py": "19_ReLU",
        "level_1_problem_19_sample_0_kernel.py": "19_ReLU",
        "level_1_problem_99_sample_0_kernel.py": None,
    }


def test_notes_inside_a_problem_folder_are_not_candidates_and_a_transcript_is(tmp_path):
    """A NOTES.md in a problem folder had been judged (and counted a load_error)."""
    cands = tmp_path / "cands" / "relu"
    cands.mkdir(parents=True)
    for notes in ("NOTES.md", "README.txt", "notes-run3.md", "Changelog.md"):
        (cands / notes).write_text("what we tried")
    (cands / "sample_notes.md").write_text("a model's answer, named by its sample")
    (cands / "a.py").write_text("class ModelNew: pass\n")
    assert sorted(c.rel_path for c in discover_candidates(tmp_path / "cands", [])) == ["relu/a.py", "relu/sample_notes.md"]


def test_an_upper_case_suffix_and_a_link_to_nothing_are_candidates_too(tmp_path):
    """Every file that looks like an answer gets a result: none is left out without a word."""
    cands = tmp_path / "cands" / "relu"
    cands.mkdir(parents=True)
    (cands / "UPPER.PY").write_text("class ModelNew: pass\n")
    (cands / "dangling.py").symlink_to(tmp_path / "gone.py")
    (cands / "loop.py").symlink_to(cands / "loop.py")
    found = {c.rel_path: c for c in discover_candidates(tmp_path / "cands", discover_problems(REPO / "problems"))}
    assert found["relu/UPPER.PY"].code == "class ModelNew: pass\n"
    assert found["relu/dangling.py"].extraction_error == "the file cannot be read: No such file or directory"
    assert "cannot be read" in found["relu/loop.py"].extraction_error


def test_a_block_without_shared_indentation_keeps_its_text_exactly():
    """Its code hash, which names its builds and results, must not change with the dedent."""
    assert split_code_blocks("```python\na = 1\n   \nb = 2\n```\n")[0].text == "a = 1\n   \nb = 2\n"
