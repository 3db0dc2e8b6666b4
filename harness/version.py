"""The harness's version, recorded with every run: pyproject.toml's, kept equal by a unit test."""

__version__ = "0.1.0"
