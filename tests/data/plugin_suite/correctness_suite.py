"""gpu_benchmark's correctness defaults against planted errors and genuine rounding
(tests/test_pytest_plugin.py runs it under --benchmark-disable: checked, not measured)."""

import pytest
import torch

torch.manual_seed(0)


def softmax_fp32_inside(x):
    return torch.softmax(x.float(), -1).to(x.dtype)


def softmax_every_step_rounded(x):
    """Each intermediate in the input's dtype: the rounding a careless but correct kernel has."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def one_percent_high(x):
    return (torch.softmax(x.float(), -1) * 1.01).to(x.dtype)


def scaled_up(x):
    return (x.float() * 1.01).to(x.dtype)


def identity(x):
    return x.clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_off_by_1pct_small_values(gpu_benchmark, dtype):
    """A softmax's values are ~1/1024: a 1% error is far under atol element by element."""
    gpu_benchmark(one_percent_high, torch.randn(64, 1024).to(dtype), reference=softmax_fp32_inside)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_off_by_1pct_large_values(gpu_benchmark, dtype):
    gpu_benchmark(scaled_up, (torch.randn(64, 1024) * 1000).to(dtype), reference=identity)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_genuine_rounding(gpu_benchmark, dtype):
    gpu_benchmark(softmax_every_step_rounded, torch.randn(64, 1024).to(dtype), reference=softmax_fp32_inside)


def test_a_test_may_loosen_the_norm_bound(gpu_benchmark):
    gpu_benchmark(one_percent_high, torch.randn(64, 1024), reference=softmax_fp32_inside, norm_rtol=0.02)


def test_a_reference_that_is_not_a_function(gpu_benchmark):
    x = torch.randn(8, 8)
    gpu_benchmark(softmax_fp32_inside, x, reference=torch.softmax(x, -1))


def test_an_integer_output_needs_its_bounds(gpu_benchmark):
    x = torch.arange(8)
    gpu_benchmark(identity, x, reference=identity)
