from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
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
