import types

import torch.nn as nn
from torch.utils.cpp_extension import load_inline  # noqa: F401  (a C++ candidate's import)

relu_ext = types.ModuleType("relu_ext")  # stands in for what load_inline returns


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_ext(x)
