"""RMSNorm's operator model: FLOP and byte counts, inputs, and the float64 reference.

    y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w          eps = EPS = 1e-6

for x of shape (rows, hidden) and one weight w of shape (hidden,), all in the case dtype
(fp16 or bf16), y written in the same dtype and layout. The one mode is "fwd".

FLOPs (`flops`): 4 per element of x: the square, its add into the row sum, the scale by the
row's 1/rms and the multiply by the weight. The 3 per-row operations (divide the sum by
hidden, add eps, the reciprocal square root) are not counted: under 0.15% of the total at
hidden >= 2048. The figure is for an arithmetic-intensity label only; RMSNorm is memory-bound
(about 4 FLOPs per 4 bytes moved in fp16, far left of any GPU's ridge point).

Bytes (`bytes_moved`): the fewest a kernel must move through DRAM: read x once, write y once,
read w once: (2 * rows * hidden + hidden) * element size. The achieved bandwidth of a case is
this over its median time, held against the GPU's measured copy bandwidth
(history/analysis/ceilings.toml, kind copy_tbps). A kernel that also stores the per-row
1/rms for a backward pass (Liger does) moves 4 * rows bytes more, not counted: that is work
the forward problem does not require.

Inputs (`make_inputs`): x = N(0, 1) * s_r with one scale s_r = 2^U(-3, 3) per row, so row
norms differ by up to 64x and a kernel that skips the normalisation, or applies one row's
1/rms to another, errs by far more than any tolerance (with unscaled N(0, 1) rows every rms
is within a few percent of 1 and such bugs would pass in bf16); w = N(0, 1), so a kernel that
drops the weight fails too. Drawn in float32 by a generator on the target device seeded with
`seed` (the same recipe as kernels/inputs.py), then rounded once to the case dtype.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .shapes import RowsShape

EPS = 1e-6
MODES = ("fwd",)
ELEMENT_SIZE = {"fp16": 2, "bf16": 2, "fp32": 4}
ROW_SCALE_LOG2 = 3.0  # row scales 2^U(-3, 3): 1/8 .. 8
REFERENCE_CHUNK_BYTES = 1 << 30  # float64 intermediates held at once by reference64
# The per-dtype tolerances of every RMSNorm case (Operator.tolerances; kernels.correctness reads it).
TOLERANCES_PATH = Path(__file__).resolve().with_name("tolerances.toml")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"rmsnorm: unknown mode {mode!r}; known: {', '.join(MODES)}")


def element_size(dtype: str) -> int:
    try:
        return ELEMENT_SIZE[dtype]
    except KeyError:
        raise ValueError(f"rmsnorm: unknown dtype {dtype!r}; known: {', '.join(ELEMENT_SIZE)}") from None


def flops(shape: RowsShape, mode: str) -> float:
    """4 FLOPs per element of x (module docstring says what is counted)."""
    _check_mode(mode)
    return 4.0 * shape.rows * shape.hidden


def bytes_moved(shape: RowsShape, dtype: str, mode: str) -> float:
    """Minimum DRAM traffic of one call: read x, write y, read w, each once."""
    _check_mode(mode)
    return float((2 * shape.rows * shape.hidden + shape.hidden) * element_size(dtype))


def make_inputs(shape: RowsShape, dtype: str, mode: str, device: Any, seed: int) -> tuple[Any, Any]:
    """(x, w): x (rows, hidden) with per-row scales, w (hidden,), contiguous, in `dtype`."""
    import torch

    from ..inputs import torch_dtype

    _check_mode(mode)
    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))
    target = torch_dtype(dtype)
    x = torch.randn((shape.rows, shape.hidden), generator=generator, device=device, dtype=torch.float32)
    exponent = torch.rand((shape.rows, 1), generator=generator, device=device, dtype=torch.float32)
    x.mul_(torch.exp2(exponent.mul_(2 * ROW_SCALE_LOG2).sub_(ROW_SCALE_LOG2)))
    w = torch.randn((shape.hidden,), generator=generator, device=device, dtype=torch.float32)
    return x.to(target).contiguous(), w.to(target).contiguous()


def make_output(x: Any) -> Any:
    """An uninitialised y buffer for a kernel that writes into one: x's shape, dtype, device."""
    import torch

    return torch.empty_like(x, memory_format=torch.contiguous_format)


def reference64(inputs: tuple[Any, Any], mode: str) -> Any:
    """float64 y of the variant's own (rounded) inputs, on their device.

    Rows are processed in chunks so the float64 intermediates stay under
    REFERENCE_CHUNK_BYTES; float64 rounding is ~1e10 times below fp16/bf16 error, so the
    reference's own error is negligible against tolerances.toml.
    """
    import torch

    _check_mode(mode)
    x, w = inputs
    if x.dim() != 2 or w.dim() != 1 or w.shape[0] != x.shape[1]:
        raise ValueError(
            f"rmsnorm reference expects x (rows, hidden) and w (hidden,); got {tuple(x.shape)}, {tuple(w.shape)}"
        )
    rows, hidden = x.shape
    w64 = w.to(torch.float64)
    out = torch.empty((rows, hidden), dtype=torch.float64, device=x.device)
    chunk = max(1, REFERENCE_CHUNK_BYTES // (2 * 8 * hidden))
    for start in range(0, rows, chunk):
        x64 = x[start : start + chunk].to(torch.float64)
        rstd = torch.rsqrt(x64.square().mean(dim=-1, keepdim=True) + EPS)
        torch.mul(x64 * rstd, w64, out=out[start : start + chunk])
    return out


def make_operator(operator_type: type) -> Any:
    """RMSNorm's `Operator` record, built from the record type `kernels.operators.Operator`
    (passed in, so this module imports without it)."""
    return operator_type(
        name="rmsnorm",
        modes=MODES,
        baseline="rmsnorm_torch",
        references=("rmsnorm_liger", "rmsnorm_quack"),
        bound="memory",
        flops=flops,
        bytes=bytes_moved,
        make_inputs=make_inputs,
        reference64=reference64,
        shape_type=RowsShape,
        tolerances=TOLERANCES_PATH,
    )
