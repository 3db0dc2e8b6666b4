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
