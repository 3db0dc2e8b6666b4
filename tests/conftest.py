from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


E2E = Path(__file__).parent / "e2e"


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    """Everything under tests/e2e/ is the end-to-end tier (marker `e2e`: workers started, C++
    compiled, whole runs); GPU tests skip where torch sees no CUDA device."""
    skip = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if E2E in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
        if skip is not None and "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    """One extension build cache for the session, never the user's."""
    return tmp_path_factory.mktemp("extensions")


@pytest.fixture(scope="session", autouse=True)
def cache_home(tmp_path_factory) -> Iterator[Path]:
    """Never the user's cache: runs' default build cache and the precompiled torch header (made by
    the first C++ build, then shared by every test's builds) live here for the session."""
    home = tmp_path_factory.mktemp("cache-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home))
        yield home
