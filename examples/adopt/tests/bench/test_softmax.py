"""The kernels' benchmarks: each test measures one kernel with attnwatch's gpu_benchmark fixture
(CUDA events, L2 flushed, interleaved with its reference, output checked against it).

    pytest tests/bench --benchmark-json=bench.json && attnwatch ingest bench.json

Series are named after the kernels: `softmax_triton/<shape>/<dtype>` and `softmax_torch/...`,
which is also test_softmax_triton's reference (one function, one series).
"""

import pytest
import torch

from mykernels import softmax_torch, softmax_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# (rows, cols): report-sized problems on a GPU; small ones on a CPU (Triton's interpreter).
SHAPES = [(4096, 1024), (4096, 4096)] if DEVICE == "cuda" else [(4, 64)]
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32
SEED = 1  # fixed inputs: a correctness failure reproduces, and both sides of a compare see the same data


def _inputs(shape: tuple[int, int]) -> torch.Tensor:
    generator = torch.Generator(device=DEVICE).manual_seed(SEED)
    return torch.randn(*shape, device=DEVICE, dtype=DTYPE, generator=generator)


def _work(x: torch.Tensor) -> dict:
    """One pass reads and writes every element; ~5 operations each (max, subtract, exp, sum, divide)."""
    return {"flops": 5 * x.numel(), "bytes": 2 * x.numel() * x.element_size()}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_triton(gpu_benchmark, shape):
    x = _inputs(shape)
    gpu_benchmark(softmax_triton, x, reference=softmax_torch, **_work(x))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_softmax_torch(gpu_benchmark, shape):
    x = _inputs(shape)
    gpu_benchmark(softmax_torch, x, expected=torch.softmax(x.float(), dim=-1), **_work(x))
