"""A user's pytest-benchmark suite with the gpu_benchmark fixture (tests/test_pytest_plugin.py)."""

import pytest
import torch

# The session's own thread count, not torch's default (which is 1 on a one-core machine): the
# last test checks that measuring left it as it was.
SESSION_THREADS = 3
torch.set_num_threads(SESSION_THREADS)


def reference_softmax(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def fast_softmax(x):
    return torch.softmax(x, -1)


@pytest.mark.parametrize("cols", [256])
def test_softmax(gpu_benchmark, cols):
    x = torch.randn(32, cols)
    out = gpu_benchmark(
        torch.softmax,
        x,
        -1,
        reference=lambda x, dim: reference_softmax(x),
        flops=5 * x.numel(),
        bytes=2 * 4 * x.numel(),
    )
    assert out.shape == x.shape


def test_add_checked(gpu_benchmark):
    x = torch.ones(64)
    gpu_benchmark(torch.add, x, x, check=lambda out: bool((out == 2).all()))


def test_wrong_output(gpu_benchmark):
    x = torch.ones(64)
    gpu_benchmark(torch.mul, x, 3.0, expected=torch.full((64,), 2.0))


@pytest.mark.parametrize("rows", [64])
def test_fast_softmax(gpu_benchmark, rows):
    gpu_benchmark(fast_softmax, torch.randn(rows, 64), reference=reference_softmax)


@pytest.mark.parametrize("rows", [64])
def test_reference_softmax(gpu_benchmark, rows):
    """The function test_fast_softmax uses as its reference, measured by a test of its own: one series."""
    x = torch.randn(rows, 64)
    gpu_benchmark(reference_softmax, x, expected=torch.softmax(x, -1))


@pytest.mark.parametrize("cols", [256])
def test_same_case_twice(gpu_benchmark, cols):
    gpu_benchmark(torch.softmax, torch.randn(32, cols), -1, name="softmax")


def test_a_tensor_where_the_function_belongs(gpu_benchmark):
    x = torch.randn(8, 8)
    gpu_benchmark(torch.softmax(x, -1))


def test_the_session_keeps_its_threads():
    assert torch.get_num_threads() == SESSION_THREADS
