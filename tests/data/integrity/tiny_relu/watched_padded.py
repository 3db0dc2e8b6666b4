import time

import torch
import torch.nn as nn

# Distinct operators on a one-element tensor: microseconds of work, but each one a name in the
# profile, which once bought the profiled calls the reference's whole profiler cost again.
PADDING = [torch.abs, torch.neg, torch.sin, torch.cos, torch.tan, torch.asin, torch.acos, torch.atan, torch.sinh,
           torch.cosh, torch.tanh, torch.asinh, torch.exp, torch.exp2, torch.expm1, torch.log, torch.log2,
           torch.log10, torch.log1p, torch.sqrt, torch.rsqrt, torch.sigmoid, torch.floor, torch.ceil, torch.round,
           torch.trunc, torch.frac, torch.reciprocal, torch.sign, torch.erf, torch.erfc, torch.lgamma, torch.digamma,
           torch.square, torch.sinc, torch.deg2rad, torch.rad2deg, torch.nan_to_num, torch.signbit, torch.isnan,
           torch.isinf, torch.isfinite, torch.zeros_like, torch.ones_like, torch.clone, torch.i0, torch.logit]


class ModelNew(nn.Module):
    """Shows the profiler a slow path of its own (a sleep stands for a slow kernel) padded with
    dozens of trivial operators; unwatched, it runs the reference's operator."""

    def forward(self, x):
        # The profiler context's flag: torch.autograd._profiler_enabled() is False while every
        # thread's operators are recorded.
        if torch.autograd.profiler._is_profiler_enabled:
            one = torch.full((1,), 0.5)
            for op in PADDING:
                op(one)
            time.sleep(0.04)
            return (x + x.abs()) * 0.5
        return torch.relu(x)
