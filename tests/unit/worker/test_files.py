"""What the parent does with files a worker left: it copies a build's files (and what Triton
compiled) into the cache and removes a scratch dir, whatever shape a candidate gave them (links,
FIFOs, modes, depth)."""

import os

from harness.worker.processes import copy_tree, remove_tree


def nest(root, depth):
    """Directories `depth` deep under `root`, made by descriptor (no path is too long)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)


def copy(source, target, max_depth=4, max_files=100, skip=("lock",), max_bytes=None):
    copy_tree(source, target, max_depth, max_files, skip, max_bytes)


def test_a_builds_files_are_copied_with_their_times(tmp_path):
    built = tmp_path / "ext" / "relu"
    built.mkdir(parents=True)
    (built / "relu.so").write_bytes(b"\x7fELF")
    os.utime(built / "relu.so", ns=(1_000_000_000, 2_000_000_000))
    (built / "lock").write_text("")  # torch's baton: skipped
    copy(tmp_path / "ext", tmp_path / "key")
    kept = tmp_path / "key" / "relu" / "relu.so"
    assert kept.read_bytes() == b"\x7fELF" and kept.stat().st_mtime_ns == 2_000_000_000
    assert not (tmp_path / "key" / "relu" / "lock").exists()


def test_no_link_is_followed_copied_or_written_through(tmp_path):
    secret = tmp_path / "home" / "secret"
    secret.parent.mkdir()
    secret.write_text("theirs")
    source = tmp_path / "ext"
    source.mkdir()
    (source / "leak").symlink_to(secret)
    (source / "home").symlink_to(secret.parent, target_is_directory=True)
    (source / "x").write_text("built")
    os.mkfifo(source / "pipe")  # reading it would block the parent
    target = tmp_path / "key"
    target.mkdir()
    (target / "x").symlink_to(secret)  # as an older copy could have left
    copy(source, target)
    assert sorted(p.name for p in target.iterdir()) == ["x"]
    assert not (target / "x").is_symlink() and (target / "x").read_text() == "built"
    assert secret.read_text() == "theirs"

    (tmp_path / "linked_ext").symlink_to(secret.parent, target_is_directory=True)
    copy(tmp_path / "linked_ext", tmp_path / "other_key")  # the top a link: nothing at all
    assert not (tmp_path / "other_key").exists()


def test_directory_modes_are_ours_depth_and_count_bounded(tmp_path):
    source = tmp_path / "ext"
    nest(source / "deep", 3000)
    source.chmod(0o500)
    try:
        copy(source, tmp_path / "key", max_depth=3)
    finally:
        source.chmod(0o700)
        remove_tree(source)  # pytest's own removal of old tmp dirs recurses
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "key" / "deep" / "d").is_dir() and not (tmp_path / "key" / "deep" / "d" / "d").exists()

    many = tmp_path / "many"
    many.mkdir()
    for index in range(20):
        (many / f"f{index}").write_text("x")
    copy(many, tmp_path / "few", max_files=5)
    assert len(list((tmp_path / "few").iterdir())) == 5


def test_a_tree_nested_past_the_recursion_limit_is_removed_and_no_link_followed(tmp_path):
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "kept").write_text("x")
    scratch = tmp_path / "scratch"
    nest(scratch, 3000)
    (scratch / "out").symlink_to(decoy, target_is_directory=True)
    remove_tree(scratch)
    assert not os.path.lexists(scratch)
    assert (decoy / "kept").read_text() == "x"


def test_a_copy_keeps_to_its_byte_budget_whatever_the_files_claim_on_disk(tmp_path):
    """A sparse file takes no room in the worker's scratch but its whole size in a copy."""
    source = tmp_path / "triton-cache"
    source.mkdir()
    (source / "small.cubin").write_bytes(b"x" * 100)
    with open(source / "sparse.bin", "wb") as sparse:
        sparse.truncate(1 << 30)
    copy(source, tmp_path / "kept", max_bytes=1 << 20)
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["small.cubin"]


LINKED_EXTENSIONS = '''
import os
import shutil

extensions = os.environ["TORCH_EXTENSIONS_DIR"]
shutil.rmtree(extensions, ignore_errors=True)
os.symlink({decoy!r}, extensions)  # the parent must not follow it to another key's cache
'''
