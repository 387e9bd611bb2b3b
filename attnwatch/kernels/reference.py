"""The float64 attention reference that every variant is checked against.

``reference_attention(q, k, v, causal)`` upcasts the variant's own (fp16/bf16) inputs to
float64 and computes ``softmax(q k^T / sqrt(D) [+ causal mask]) v`` on the inputs' device:
on CPU for the small test shapes, on the GPU (float64 CUDA matmuls, about 60 TFLOP/s on an
H200) for the benchmark shapes, so checking b16_h16_s2k stays in the milliseconds instead
of minutes on the host. Float64 rounding (2^-53) is ~10^10 times below fp16/bf16 error,
so the reference's own error is negligible against any tolerance in tolerances.toml; the
softmax subtracts the row maximum first (torch.softmax does), so nothing overflows.

Memory is bounded by processing (batch*head) slices in chunks: the float64 score matrix of
one head is S*S*8 bytes (32 MiB at S=2048), and a chunk holds at most `max_chunk_bytes`.
"""

from __future__ import annotations

from typing import Any

from .inputs import softmax_scale

DEFAULT_MAX_CHUNK_BYTES = 1 << 30


def reference_attention(q: Any, k: Any, v: Any, causal: bool, *, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> Any:
    """float64 attention output, shape (B, H, S, D), on q's device (layout: kernels.inputs)."""
    import torch

    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(
            f"reference expects q, k, v of one (B, H, S, D) shape; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    batch, heads, seq, dim = q.shape
    scale = softmax_scale(dim)
    qf, kf, vf = (t.reshape(batch * heads, seq, dim) for t in (q, k, v))
    out = torch.empty((batch * heads, seq, dim), dtype=torch.float64, device=q.device)
    mask = None
    if causal:
        # True above the diagonal: key j > query i is hidden.
        mask = torch.ones((seq, seq), dtype=torch.bool, device=q.device).triu_(1)
    per_head = seq * seq * 8 * 2 + seq * dim * 8 * 4  # scores + probabilities + q, k, v, out
    chunk = max(1, max_chunk_bytes // per_head)
    for start in range(0, batch * heads, chunk):
        stop = min(start + chunk, batch * heads)
        qd = qf[start:stop].to(torch.float64)
        kd = kf[start:stop].to(torch.float64)
        vd = vf[start:stop].to(torch.float64)
        scores = torch.matmul(qd, kd.transpose(1, 2)).mul_(scale)
        if mask is not None:
            scores.masked_fill_(mask, float("-inf"))
        probabilities = torch.softmax(scores, dim=-1)
        torch.matmul(probabilities, vd, out=out[start:stop])
    return out.reshape(batch, heads, seq, dim)
