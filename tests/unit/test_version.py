"""The version every run records is the one the package is published with."""

import re

import harness
from tests.support import REPO


def test_the_recorded_version_is_pyprojects():
    published = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert harness.__version__ == published
