"""Inputs for one case, and the layout convention every variant follows.

Layout convention (ALL variants, library and custom alike):

* ``q``, ``k``, ``v`` and the output ``out`` are contiguous tensors of shape
  ``(B, H, S, D)`` = (batch, heads, sequence length, head dim), row-major, in the case's
  dtype (``fp16`` -> ``torch.float16``, ``bf16`` -> ``torch.bfloat16``), on one device.
  Sq = Sk = S (self-attention shapes, DESIGN.md "Shapes").
* The softmax scale is ``1 / sqrt(D)`` (``softmax_scale``), applied to ``q @ k^T`` before
  the softmax.
* Causal means lower-triangular: query row ``i`` attends to keys ``j <= i`` (Sq = Sk, so
  the diagonal is aligned at the top-left; every row has at least one visible key).
* Forward only, no dropout, no attention mask other than the causal one.

Inputs are fresh standard-normal samples (never zeros or constants, which would hide
wrong indexing: every row of ``softmax(0) @ v`` is the same). The same (case, device,
seed) gives the same tensors; CPU and CUDA generators give different streams, so a seed
is reproducible per device type.
"""

from __future__ import annotations

import math
from typing import Any

from kernels.cases import Case

TORCH_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def torch_dtype(name: str) -> Any:
    """The torch dtype of a case dtype name ("fp16", "bf16", "fp32")."""
    import torch

    try:
        return getattr(torch, TORCH_DTYPE_NAMES[name])
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(TORCH_DTYPE_NAMES)}") from None


def softmax_scale(head_dim: int) -> float:
    """The softmax scale of the convention: 1 / sqrt(D)."""
    return 1.0 / math.sqrt(head_dim)


def input_shape(case: Case) -> tuple[int, int, int, int]:
    """(B, H, S, D) of the case: the shape of q, k, v and out."""
    s = case.shape
    return (s.batch, s.heads, s.seq_len, s.head_dim)


def make_inputs(case: Case, device: Any, seed: int) -> tuple[Any, Any, Any]:
    """Fresh N(0, 1) q, k, v for `case` on `device`, reproducible from `seed`.

    Sampled in float32 by a generator on the target device (fast for the large shapes)
    and rounded once to the case dtype, so fp16 and bf16 cases of one seed see the same
    underlying values up to rounding.
    """
    import torch

    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    dtype = torch_dtype(case.dtype)
    shape = input_shape(case)
    tensors = []
    for _ in range(3):
        x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
        tensors.append(x.to(dtype).contiguous())
    q, k, v = tensors
    return q, k, v


def make_output(case: Case, device: Any) -> Any:
    """An uninitialised output buffer in the convention's layout, for variants that write
    into a buffer they are given (the correctness suite poisons it before each call)."""
    import torch

    return torch.empty(input_shape(case), device=torch.device(device), dtype=torch_dtype(case.dtype))
