"""Evaluation harness for GPU kernels written by language models."""

import warnings

__version__ = "0.1.0"

# A torch built without NumPy says so at import, in every process; the harness never hands torch a
# NumPy array, so that one warning is noise (a problem that uses NumPy fails with its ImportError).
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
