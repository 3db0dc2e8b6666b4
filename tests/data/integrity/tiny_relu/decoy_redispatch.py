import torch
import torch.nn as nn

# redispatch_relu.py with a decoy: a computing operator the profiler records, on two elements,
# so that the profile has one. Its operators read next to none of the data the reference's read.
_call = getattr(torch.ops.aten.clamp_min.default, "re" + "dispatch")
_keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class ModelNew(nn.Module):
    def forward(self, x):
        x[0, :2].mul(1.0)  # a decoy: a computing operator, on two elements
        return _call(_keys, x, 0.0)
