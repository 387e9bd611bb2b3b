"""A user's pytest-benchmark suite with the gpu_benchmark fixture (tests/test_pytest_plugin.py)."""

import pytest
import torch


def reference_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("cols", [256])
def test_softmax(gpu_benchmark, cols):
    x = torch.randn(32, cols)
    out = gpu_benchmark(torch.softmax, x, -1, reference=lambda x, dim: reference_softmax(x), flops=5 * x.numel(),
                        bytes=2 * 4 * x.numel())
    assert out.shape == x.shape


def test_add_checked(gpu_benchmark):
    x = torch.ones(64)
    gpu_benchmark(torch.add, x, x, check=lambda out: bool((out == 2).all()))


def test_wrong_output(gpu_benchmark):
    x = torch.ones(64)
    gpu_benchmark(torch.mul, x, 3.0, expected=torch.full((64,), 2.0))
