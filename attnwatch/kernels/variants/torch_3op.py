"""`torch_3op`: unfused attention as three library calls, the seeds' "cuBLAS 3-kernel" path.

    scores = (q @ k^T) * 1/sqrt(D)     one batched GEMM (cuBLAS on CUDA); the scale is the
                                       GEMM's alpha, so it costs no extra kernel
    scores[j > i] = -inf               causal only: one masked_fill kernel (mask built in prepare)
    p = softmax(scores, dim=-1)        torch softmax (accumulates in fp32 for fp16/bf16)
    out = p @ v                        one batched GEMM into the preallocated output

Everything is materialised: the S x S scores and probabilities (2 * B*H*S^2 elements of the
case dtype) live in memory, which is what makes this path slow and what the fused variants
remove. Buffers and the mask are allocated in `prepare`; the output buffer is `Prepared.out`
so the correctness suite's NaN poisoning also checks that every element is written.
"""

from __future__ import annotations

from typing import Any

from ..capabilities import capabilities
from ..cases import Case
from ..inputs import input_shape, make_inputs, make_output, softmax_scale, torch_dtype
from ..variant import Prepared, Variant

# Above this share of device memory the materialised scores and probabilities are declared
# unsupported instead of discovered as an out-of-memory crash.
MEMORY_SHARE = 0.5


def _unsupported(case: Case) -> str | None:
    if case.dtype not in ("fp16", "bf16"):
        return f"only fp16 and bf16 are measured; got {case.dtype}"
    if not capabilities().cuda:
        return None
    import torch

    b, h, s, _ = input_shape(case)
    element = torch.empty((), dtype=torch_dtype(case.dtype)).element_size()
    need = 2 * b * h * s * s * element
    total = torch.cuda.get_device_properties(0).total_memory
    if need > MEMORY_SHARE * total:
        return (
            f"scores and probabilities take {need / 2**30:.1f} GiB (2*B*H*S^2 elements), "
            f"over {MEMORY_SHARE:.0%} of the device's {total / 2**30:.0f} GiB"
        )
    return None


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    import torch

    q, k, v = make_inputs(case, device, seed)
    b, h, s, d = input_shape(case)
    scale = softmax_scale(d)
    q3, v3 = q.view(b * h, s, d), v.view(b * h, s, d)
    k3t = k.view(b * h, s, d).transpose(1, 2)  # a view: cuBLAS reads it as a transposed operand
    scores = torch.empty((b * h, s, s), dtype=q.dtype, device=q.device)
    out = make_output(case, device)
    out3 = out.view(b * h, s, d)
    hidden = torch.ones((s, s), dtype=torch.bool, device=q.device).triu_(1) if case.causal else None

    def run() -> Any:
        torch.baddbmm(scores, q3, k3t, beta=0.0, alpha=scale, out=scores)
        if hidden is not None:
            scores.masked_fill_(hidden, float("-inf"))
        probabilities = torch.softmax(scores, dim=-1)
        torch.bmm(probabilities, v3, out=out3)
        return out

    kernels = 4 if case.causal else 3
    return Prepared(fn=run, q=q, k=k, v=v, out=out, info={"kernels": kernels, "torch": torch.__version__})


TORCH_3OP = Variant(
    name="torch_3op",
    family="torch",
    description="unfused matmul -> softmax -> matmul (cuBLAS GEMMs + torch softmax; causal adds a masked_fill)",
    prepare=_prepare,
    unsupported=_unsupported,
    lineage="cuBLAS 3-kernel; Phase B hybrid",
)

VARIANTS = (TORCH_3OP,)
