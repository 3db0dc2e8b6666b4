"""The integrity rules the parent applies: fallback to the reference's operators, and input mutation."""

import torch

from harness.judge.integrity import fallback_evidence, mutated_inputs
from harness.worker.protocol import Profile


def test_fallback_rules():
    reference = Profile(ops=["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::empty"],
                        kernels=["implicit_convolve_sgemm", "fill_kernel"])
    honest = Profile(ops=["aten::empty", "aten::contiguous"], kernels=["my_conv_kernel", "fill_kernel"])
    assert fallback_evidence(reference, honest) == []
    library = Profile(ops=["aten::cudnn_convolution"], kernels=["implicit_convolve_sgemm"])
    evidence = fallback_evidence(reference, library)
    assert "convolution" in evidence[0] and any("implicit_convolve_sgemm" in e for e in evidence)


def test_input_mutation_is_exact():
    a = torch.arange(6.0)
    assert mutated_inputs([a, a], [a.clone(), a + 1e-3 * (a == 5)]) == [1]
    assert mutated_inputs([a], [a.clone()]) == []
