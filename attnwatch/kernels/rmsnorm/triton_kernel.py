"""The Triton RMSNorm forward of `rmsnorm_triton`: one program per row, one pass over x.

Each program loads its whole row (BLOCK_N = the next power of two >= hidden, the tail
masked) into registers, accumulates sum(x^2) in fp32, and writes y = x * rstd * w rounded
once to the output dtype. x is read from DRAM exactly once and y written once, which is the
byte model's minimum (kernels/rmsnorm/model.py); w (<= 64 KiB) stays in L2 across rows.
The configuration and its limits are in triton_config.py.

Imports Triton at module level: only kernels/variants/rmsnorm_triton.py's `prepare` and the
tests import this module.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import triton
import triton.language as tl

from .triton_config import RowConfig, row_config

# Fused multiply-add on under every Triton (3.10 turns it off by default): as kernels/triton/fa2_fwd.py.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


@triton.jit
def rmsnorm_fwd_kernel(X, W, Y, stride_x, stride_y, hidden, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < hidden
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(Y + row * stride_y + cols, y.to(Y.dtype.element_ty), mask=mask)


class RmsnormLaunch(Protocol):
    """make_launcher's result: a zero-argument launch (it returns `out`) and the configuration it runs."""

    config: RowConfig

    def __call__(self) -> Any: ...


def make_launcher(x: Any, w: Any, out: Any, eps: float) -> RmsnormLaunch:
    """A zero-argument callable that launches the kernel once, writing y into `out`.

    The grid, strides and configuration are fixed here, so a call is one Triton launch.
    """
    if x.dim() != 2 or out.shape != x.shape or w.shape != (x.shape[1],):
        raise ValueError(f"rmsnorm_triton: expects x (rows, hidden), w (hidden,), out like x; got "
                         f"{tuple(x.shape)}, {tuple(w.shape)}, {tuple(out.shape)}")
    if x.stride(1) != 1 or out.stride(1) != 1 or not w.is_contiguous():
        raise ValueError("rmsnorm_triton: rows of x and out, and w, must be contiguous")
    rows, hidden = x.shape
    config = row_config(hidden)
    kernel = rmsnorm_fwd_kernel[(rows,)]
    stride_x, stride_y = x.stride(0), out.stride(0)

    def run() -> Any:
        kernel(x, w, out, stride_x, stride_y, hidden, eps, BLOCK_N=config.block_n, num_warps=config.num_warps,
               **COMPILE_OPTIONS)
        return out

    launch = cast(RmsnormLaunch, run)  # once `config` is set
    launch.config = config
    return launch
