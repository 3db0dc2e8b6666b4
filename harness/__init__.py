"""Evaluation harness for GPU kernels written by language models."""

import warnings
from typing import TYPE_CHECKING

from .version import __version__

# A torch built without NumPy says so at import, in every process; the harness never hands torch a
# NumPy array, so that one warning is noise (a problem that uses NumPy fails with its ImportError).
NUMPY_NOISE = "Failed to initialize NumPy"
warnings.filterwarnings("ignore", message=NUMPY_NOISE, category=UserWarning)

# The public API (README, "Python API"): stable names. Resolved on first use, so `import harness`
# (the command line's --help, the pytest plugin's option parsing) does not import torch.
_PUBLIC = {
    "evaluate": "harness.api", "Evaluator": "harness.api", "UsageError": "harness.errors",
    "Result": "harness.records", "Status": "harness.records", "Flag": "harness.flags",
    "Diagnosis": "harness.records", "TimingStats": "harness.records", "EvalConfig": "harness.records",
}
__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_PUBLIC[name]), name)


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # the names above, statically, for type checkers
    from .api import Evaluator, evaluate  # noqa: F401
    from .errors import UsageError  # noqa: F401
    from .flags import Flag  # noqa: F401
    from .records import Diagnosis, EvalConfig, Result, Status, TimingStats  # noqa: F401
