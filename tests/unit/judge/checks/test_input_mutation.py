"""Inputs changed by forward, byte for byte."""

import torch

from harness.judge.checks.input_mutation import mutated_inputs


def test_input_mutation_is_exact_and_nan_safe():
    a = torch.arange(6.0)
    assert mutated_inputs([a, a], [a.clone(), a + 1e-3 * (a == 5)]) == [1]
    assert mutated_inputs([a], [a.clone()]) == []
    with_nan = torch.tensor([1.0, float("nan")])
    assert mutated_inputs([with_nan], [with_nan.clone()]) == []  # a NaN that stayed a NaN is no change
