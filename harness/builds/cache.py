"""The build cache: where each candidate's extensions are compiled, and what each build came to.

Layout: <root>/<key digest>/ holds torch's build dirs for one candidate code under one
toolchain; beside it, <key digest>.outcome.json once the build is decided and <key digest>.lock.
A key covers everything that changes the compiler's command lines or the binary: the code,
torch, CUDA, the target architectures, the compilers and Python. Two runs sharing a root take
the lock (flock, released by the kernel when its holder dies) around any build or load in a key
dir. The outcome and the lock are not in the key dir, which a worker building in place (no
namespaces) can write: there it could plant a directory, FIFO or link at their names.

Outcomes are signed (HMAC-SHA256) with `<root>/.harness-key`, which only the harness reads: a
confined worker can read neither the root nor another key dir, so it cannot forge an outcome
(say, a compile error for another candidate); an unsigned or altered outcome is built again.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import hmac
import json
import secrets
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import torch

from pydantic import BaseModel

from ..records import HostEnv
from ..worker.protocol import Failure
from .header import PrecompiledHeader

OUTCOME_SUFFIX = ".outcome.json"
LOCK_SUFFIX = ".lock"
CACHE_LAYOUT = 2  # 2: outcome and lock beside the key dir (1: inside it)
KEY_FILE = ".harness-key"
TORCH_BATON = "lock"  # torch.utils.cpp_extension's FileBaton in each extension's build dir
# A failed build's outcome holds its log's head (1 MB) and generated sources (512 kB), JSON-escaped twice.
MAX_OUTCOME_BYTES = 32 << 20


def default_build_root(host: HostEnv) -> Path:
    return Path(host.cache_home) / "harness" / "extensions"


class Toolchain(BaseModel):
    """What besides the code decides a build's output, fixed for a whole run."""

    torch: str
    cuda: str | None
    arch_list: str | None  # TORCH_CUDA_ARCH_LIST, set explicitly for build and evaluation alike
    python: str
    flags: dict[str, str]
    # Where builds are made and loaded from: "private" (namespaced workers build and load at one
    # fixed mount path) or "in_place" (in the key dir itself). torch's ninja files hold absolute
    # paths, so a build made one way is rebuilt from scratch when loaded the other.
    build_layout: Literal["private", "in_place"]

    def key(self, code_hash: str) -> str:
        """The cache key digest: one directory per code and toolchain (and cache layout: versions
        of the harness that keep their own files differently never share a key dir). Candidates
        reusing an extension name (seeds 000, 001 and 004 all call theirs conv2d_cuda) never meet."""
        payload = json.dumps({"code": code_hash, "layout": CACHE_LAYOUT, **self.model_dump()}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    def env(self) -> dict[str, str]:
        return {"TORCH_CUDA_ARCH_LIST": self.arch_list} if self.arch_list else {}


def cuda_arch_list(gpus: list[int], host: HostEnv) -> str:
    """The target GPUs' compute capabilities ("9.0"), unless the user chose TORCH_CUDA_ARCH_LIST.
    Set explicitly so a build worker that sees no GPU compiles exactly what the evaluating
    worker would, and the latter finds the build up to date."""
    if host.torch_cuda_arch_list:
        return host.torch_cuda_arch_list
    capabilities = sorted({torch.cuda.get_device_capability(gpu) for gpu in gpus})
    return ";".join(f"{major}.{minor}" for major, minor in capabilities)


def toolchain(device: str, gpus: list[int], host: HostEnv, namespaces: bool) -> Toolchain:
    return Toolchain(torch=torch.__version__, cuda=torch.version.cuda,
                     arch_list=cuda_arch_list(gpus, host) if device == "cuda" and gpus else None,
                     python=f"{sys.implementation.cache_tag}-{sys.platform}", flags=dict(host.build_flags),
                     build_layout="private" if namespaces else "in_place")


class BuildCache:
    """A cache root under one toolchain: the key directory for each code hash, and each key's
    signed build outcome."""

    def __init__(self, root: Path, toolchain: Toolchain, headers: PrecompiledHeader | None = None):
        """`headers`: where torch's header is precompiled for C++ builds (None: it is not)."""
        self.root = root.resolve()  # Ray tasks and workers run elsewhere than here
        self.toolchain = toolchain
        self.headers = headers
        self._secret = _signing_key(self.root)

    def key_dir(self, code_hash: str) -> Path:
        return self.root / self.toolchain.key(code_hash)

    @property
    def parent_triton(self) -> Path:
        """Where Triton compiles the parent's own kernels (judge/compare.py): no key dir's name,
        so no worker writes it."""
        return self.root / "parent-triton"

    def _mac(self, payload: str) -> str:
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()

    def read_outcome(self, key_dir: Path) -> BuildOutcome | None:
        """The key's outcome, if this cache signed it; None (build again) when it is absent, torn
        by a crash, or not signed by us."""
        try:
            with open(_open_own(_beside(key_dir, OUTCOME_SUFFIX), os.O_RDONLY), "rb") as file:
                if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                    return None
                stored = json.loads(file.read(MAX_OUTCOME_BYTES))
            payload = stored["outcome"]
            if not hmac.compare_digest(stored["mac"], self._mac(payload)):
                return None
            return BuildOutcome.model_validate_json(payload)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_outcome(self, key_dir: Path, outcome: BuildOutcome) -> None:
        """Atomically: a reader sees the old state or the whole new file."""
        payload = outcome.model_dump_json()
        partial = key_dir.parent / f".{key_dir.name}{OUTCOME_SUFFIX}.{secrets.token_hex(8)}"
        with open(_open_own(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as file:
            file.write(json.dumps({"outcome": payload, "mac": self._mac(payload)}))
        os.replace(partial, _beside(key_dir, OUTCOME_SUFFIX))


def _beside(key_dir: Path, suffix: str) -> Path:
    """One of the cache's own files for a key: in the root, beside the key dir."""
    return key_dir.parent / f"{key_dir.name}{suffix}"


def _open_own(path: Path, flags: int) -> int:
    """A descriptor for one of the cache's own files, never through a link."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)


def _signing_key(root: Path) -> bytes:
    """The cache's secret, made on first use (owner-only), shared by every run using the root."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / KEY_FILE
    if not path.exists():  # written whole beside it, then linked in: a racing run reads one complete key
        partial = root / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as key_file:
            key_file.write(secrets.token_bytes(32))
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    return path.read_bytes()


# Exceptions that say more about the machine at the time (memory, a full disk, too many open
# files) than about the code: an import that raised one is tried again by the next run. A plain
# OSError that repeats (a library that is not there) costs its build worker on every run.
MACHINE_ERRORS = {"MemoryError", "OSError"}


class BuildStatus(str, enum.Enum):
    built = "built"  # imported (and so compiled and loaded) without error
    failed = "failed"  # the compiler or linker failed: a compile_error, no GPU needed to say so
    timed_out = "timed_out"  # the build ran past --build-timeout
    over_limit = "over_limit"  # the build worker passed a resource limit (memory, processes, disk)
    deferred = "deferred"  # import failed for another reason (it may need a GPU): the evaluation decides


class BuildOutcome(BaseModel):
    """What building one candidate ahead of evaluation found."""

    key: str
    status: BuildStatus
    seconds: float = 0.0  # compiling (and importing) it, 0 when the cache answered
    cached: bool = False
    failure: Failure | None = None  # failed: the exception load_inline raised; deferred: the import's
    log_head: str = ""  # failed: the start of the build log, where the compiler's errors are
    error: str | None = None  # timed_out, over_limit: what the parent saw
    protections: list[str] = []  # what confined the build worker

    @property
    def decided(self) -> bool:
        """Worth keeping in the cache: the same code and toolchain give the same outcome. An import
        that raised in a build worker is kept too: it decides no verdict (the evaluation imports
        the candidate again, compiling whatever is missing), so the next run goes straight there
        instead of repeating the build worker's import. A stopped worker (crashed, killed) is not,
        nor an import that ran out of something."""
        return self.status in (BuildStatus.built, BuildStatus.failed) or \
            (self.status is BuildStatus.deferred and self.failure is not None
             and self.failure.exc_type not in MACHINE_ERRORS)


@contextlib.contextmanager
def key_lock(key_dir: Path) -> Iterator[None]:
    """Exclusive use of one key dir across threads and processes. torch's own baton is a plain
    file that a killed build leaves behind (the next load_inline then waits on it forever); every
    harness process builds or loads only under this lock, so a baton found while holding it is
    stale and is removed."""
    key_dir.mkdir(parents=True, exist_ok=True)
    with open(_open_own(_beside(key_dir, LOCK_SUFFIX), os.O_WRONLY | os.O_CREAT | os.O_APPEND), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            _own_mode(key_dir)
            _remove_batons(key_dir)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _own_mode(key_dir: Path) -> None:
    """The key dir owner-only again, through no link: a worker building in place may have taken
    its own access away (chmod is not Landlock's to refuse)."""
    fd = os.open(key_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _remove_batons(key_dir: Path) -> None:
    """torch's batons in the key's own build dirs; through no link (a link named like a build
    dir would otherwise have the lock file of wherever it points removed)."""
    try:
        entries = list(os.scandir(key_dir))
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # replaced meanwhile, or unreadable
        try:
            os.unlink(TORCH_BATON, dir_fd=fd)
        except OSError:
            pass
        finally:
            os.close(fd)
