"""Inputs for one case, and the layout convention every variant follows.

Layout convention (ALL variants, library and custom alike):

* ``q``, ``k``, ``v`` and the output ``out`` are contiguous tensors of shape
  ``(B, H, S, D)`` = (batch, heads, sequence length, head dim), row-major, in the case's
  dtype (``fp16`` -> ``torch.float16``, ``bf16`` -> ``torch.bfloat16``), on one device.
  Sq = Sk = S (self-attention shapes, docs/design.md "Shapes").
* The softmax scale is ``1 / sqrt(D)`` (``softmax_scale``), applied to ``q @ k^T`` before
  the softmax.
* Causal means lower-triangular: query row ``i`` attends to keys ``j <= i`` (Sq = Sk, so
  the diagonal is aligned at the top-left; every row has at least one visible key).
* Forward only, no dropout, no attention mask other than the causal one.

Inputs are fresh standard-normal samples (never zeros or constants, which would hide
wrong indexing: every row of ``softmax(0) @ v`` is the same). The same (case, device,
seed, profile) gives the same tensors; CPU and CUDA generators give different streams, so
a seed is reproducible per device type.

Input profiles (`INPUT_PROFILES`; chosen per call or for a block with `input_profile`):

* ``normal``        q, k, v ~ N(0, 1): scores ~ N(0, 1). What the correctness suite uses.
* ``large_logits``  k gets one common component per head, k_j = k'_j + 60 u, which shifts
  every score of query row i by the same 60 (q_i . u) / sqrt(D) ~ N(0, 60^2) and leaves
  their spread over keys unchanged. Softmax is invariant to a per-row shift, so the right
  answer keeps its form; a kernel that exponentiates without subtracting the running row
  maximum overflows (rows shifted above ~88 in fp32, ~11 in fp16) or underflows to 0/0.
  Paths that round the S x S scores to fp16/bf16 before the softmax (unfused) lose ~3%
  (fp16) of each weight at logits near 90 and exceed the tolerance: that is their real
  numerical limit, which is why this profile is opt-in. Measured on torch 2.13 CPU
  (B=1 H=2 S=77 D=64, 3 seeds): sdpa, sdpa_flash and sdpa_math pass with tolerance_used
  <= 0.15; torch_3op fails with 5-29x its fp16/bf16 allowance.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from typing import Any, Iterator

TORCH_DTYPE_NAMES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}

INPUT_PROFILES = {
    "normal": "q, k, v ~ N(0, 1)",
    "large_logits": "k += 60 u per head: each score row shifted by ~N(0, 60^2), spread unchanged",
}
LARGE_LOGIT_SHIFT = 60.0

_PROFILE: contextvars.ContextVar[str] = contextvars.ContextVar("attnwatch_input_profile", default="normal")


def _checked_profile(name: str) -> str:
    if name not in INPUT_PROFILES:
        raise ValueError(f"unknown input profile {name!r}; known: {', '.join(INPUT_PROFILES)}")
    return name


@contextlib.contextmanager
def input_profile(name: str) -> Iterator[None]:
    """Inputs made inside the block (by any variant's `prepare`) follow profile `name`."""
    token = _PROFILE.set(_checked_profile(name))
    try:
        yield
    finally:
        _PROFILE.reset(token)


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


def input_shape(case: Any) -> tuple[int, int, int, int]:
    """(B, H, S, D) of the case (a kernels.cases.Case): the shape of q, k, v and out."""
    return shape_dims(case.shape)


def shape_dims(shape: Any) -> tuple[int, int, int, int]:
    """(B, H, S, D) of an attention shape (kernels.shapes.Shape)."""
    return (shape.batch, shape.heads, shape.seq_len, shape.head_dim)


def make_inputs(case: Any, device: Any, seed: int, profile: str | None = None) -> tuple[Any, Any, Any]:
    """Fresh random q, k, v for `case` (a kernels.cases.Case) on `device`, reproducible from
    `seed`: `make_qkv` of its shape and dtype."""
    return make_qkv(case.shape, case.dtype, device, seed, profile)


def make_qkv(shape: Any, dtype_name: str, device: Any, seed: int, profile: str | None = None) -> tuple[Any, Any, Any]:
    """Fresh random q, k, v of an attention shape and dtype on `device`, reproducible from `seed`.

    Sampled in float32 by a generator on the target device (fast for the large shapes)
    and rounded once to the case dtype, so fp16 and bf16 cases of one seed see the same
    underlying values up to rounding. `profile` defaults to the one `input_profile` set
    (``normal`` outside any block).
    """
    import torch

    profile = _checked_profile(profile or _PROFILE.get())

    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    dtype = torch_dtype(dtype_name)
    shape = shape_dims(shape)
    q, k, v = (torch.randn(shape, generator=generator, device=device, dtype=torch.float32) for _ in range(3))
    if profile == "large_logits":
        common = torch.randn((shape[0], shape[1], 1, shape[3]), generator=generator, device=device)
        k = k + LARGE_LOGIT_SHIFT * common
    q, k, v = (x.to(dtype).contiguous() for x in (q, k, v))
    return q, k, v


def make_output(case: Any, device: Any) -> Any:
    """An uninitialised output buffer in the convention's layout, for variants that write
    into a buffer they are given (the correctness suite poisons it before each call)."""
    import torch

    return torch.empty(input_shape(case), device=torch.device(device), dtype=torch_dtype(case.dtype))
