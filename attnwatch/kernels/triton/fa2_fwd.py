"""Fused FlashAttention-2 forward in Triton (Dao 2023, "FlashAttention-2", Algorithm 1).

One program computes a BLOCK_M x HEAD_DIM tile of the output of one (batch, head): it loads
its Q tile once and streams K and V in BLOCK_N-row blocks, carrying the online-softmax
state (running row max `m_i`, running row sum `l_i`, unnormalised accumulator `acc`, all fp32)
so that the S x S score matrix never reaches memory. The output is divided by `l_i` once, at
the end (the FA2 change over FA1 that removes a rescale per block).

Choices that matter for speed, each a reason for code below:

* exp2, not exp: softmax(x) is computed as 2^(x*log2(e) - m); the factor log2(e) is folded into
  the 1/sqrt(D) scale on the host (`qk_scale`), so a score costs one FMA and one MUFU.EX2.
* Causal block skipping: keys above the diagonal are never loaded. The key range of a query
  tile is split into the fully visible blocks left of the diagonal (no mask work at all) and
  the diagonal band, the only place the triangular mask is evaluated.
* Heaviest tiles first in the causal case: the tile index is reversed so the programs with
  the longest key range start in the first wave and short ones fill the tail.
* Tail split in the non-causal case: when S is not a multiple of BLOCK_N only the last key
  block carries the bounds mask.
* Split-KV (`SPLIT_KV` > 1) for grids too small to fill the GPU: each query tile's keys are
  divided among SPLIT_KV programs that publish partial (acc, m, l) states; the last one to
  finish merges them. On the H200 this paid only for the smallest grids (B*H=4, S=777, D=128:
  16.7 us against 17.3); at l4_mission (64 programs for 132 SMs) a deeper K/V pipeline in one
  program per tile beat it (configs.toml has the figures).
* `UPCAST_DOT` is only ever set under the CPU interpreter (see `interpreter_needs_upcast`).
* TMA (`USE_DESC`): on Hopper, Q/K/V/O move through host-built tensor descriptors (bulk tensor
  copies into shared memory, which the compiler software-pipelines `num_stages` deep and feeds
  to wgmma). Descriptors address the (B*H*S, D) view, so they are used only when S is a multiple
  of both block sizes (no tile crosses into the next head); otherwise pointer loads with masks.

Layout: contiguous (B, H, S, D) q, k, v, out; causal means lower-triangular with Sq = Sk.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Callable, Protocol, cast

import triton
import triton.language as tl

LOG2_E = 1.4426950408889634
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y, which carries batch * heads
# Passed with every launch, so an unchanged kernel compiles to the same code under every Triton:
# from 3.10 an unset TRITON_DEFAULT_FP_FUSION means no fused multiply-add (3.9 warns of it), which
# would change the code and speed with the upgrade alone. Fusion stays on, as every figure was
# measured. (The RMSNorm kernel pins the same, kernels/rmsnorm/triton_kernel.py.)
COMPILE_OPTIONS = {"enable_fp_fusion": True}


@triton.jit
def _attend_block(
    acc, l_i, m_i, q,
    K, V, desc_k, desc_v, head_off, row0, start_n, offs_m, seq_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK_DIAG: tl.constexpr, MASK_TAIL: tl.constexpr,
    USE_DESC: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    """Fold the keys [start_n, start_n + BLOCK_N) into the online-softmax state of one tile."""
    start_n = tl.multiple_of(start_n, BLOCK_N)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if USE_DESC:
        k = desc_k.load([row0 + start_n, 0])
        v = desc_v.load([row0 + start_n, 0])
    else:
        kv_offs = head_off + offs_n[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
        if MASK_TAIL:
            in_bounds = (offs_n < seq_len)[:, None]
            k = tl.load(K + kv_offs, mask=in_bounds, other=0.0)
            v = tl.load(V + kv_offs, mask=in_bounds, other=0.0)
        else:
            k = tl.load(K + kv_offs)
            v = tl.load(V + kv_offs)
    if UPCAST_DOT:
        qk = tl.dot(q.to(tl.float32), tl.trans(k).to(tl.float32))
    else:
        qk = tl.dot(q, tl.trans(k))
    if MASK_DIAG:
        visible = offs_m[:, None] >= offs_n[None, :]
        if MASK_TAIL:
            visible = visible & (offs_n[None, :] < seq_len)
        qk = tl.where(visible, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    elif MASK_TAIL:
        qk = tl.where((offs_n < seq_len)[None, :], qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_new[:, None]
    else:
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        qk = qk * qk_scale - m_new[:, None]  # one FMA per score
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if UPCAST_DOT:
        acc = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), acc)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _attend_key_range(
    acc, l_i, m_i, q,
    K, V, desc_k, desc_v,
    head_off, row0, offs_m, lo, hi, seq_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK_DIAG: tl.constexpr, MASK_TAIL: tl.constexpr,
    USE_DESC: tl.constexpr, WARP_SPEC: tl.constexpr, UPCAST_DOT: tl.constexpr,
):
    """Fold the keys [lo, hi) into the online-softmax state of one query tile, BLOCK_N at a time.

    The warp-specialised loop is a separate branch so that `warp_specialize` is only ever
    evaluated when asked for (a constexpr branch not taken is never compiled)."""
    if WARP_SPEC:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=True):
            acc, l_i, m_i = _attend_block(
                acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, start_n, offs_m, seq_len,
                qk_scale, HEAD_DIM, BLOCK_N, MASK_DIAG, MASK_TAIL, USE_DESC, UPCAST_DOT)
    else:
        for start_n in tl.range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _attend_block(
                acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, start_n, offs_m, seq_len,
                qk_scale, HEAD_DIM, BLOCK_N, MASK_DIAG, MASK_TAIL, USE_DESC, UPCAST_DOT)
    return acc, l_i, m_i


@triton.jit
def _combine_splits(
    acc, l_i, m_i, Out, WsAcc, WsMl, Counters, tile, split, head_off, offs_m, seq_len,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, EVEN_M: tl.constexpr, SPLIT_KV: tl.constexpr,
):
    """Split-KV epilogue: publish this split's partial state; the last split of the tile to
    arrive merges all partials (log-sum-exp rescaling) and writes the output.

    The protocol is CUTLASS's semaphore pattern: every thread stores its partial, a CTA
    barrier, then one acq_rel atomic increment at GPU scope (release of the partial, acquire
    of the others'); partials are read back with .cg loads so no stale L1 line is used. The
    last arriver resets the counter, so the next launch starts from zero."""
    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    slot = (tile * SPLIT_KV + split).to(tl.int64)
    tl.store(WsAcc + slot * BLOCK_M * HEAD_DIM + offs_r[:, None] * HEAD_DIM + offs_d[None, :], acc)
    tl.store(WsMl + slot * 2 * BLOCK_M + offs_r, m_i)
    tl.store(WsMl + slot * 2 * BLOCK_M + BLOCK_M + offs_r, l_i)
    tl.debug_barrier()
    arrived = tl.atomic_add(Counters + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_KV - 1:
        first = (tile * SPLIT_KV).to(tl.int64)
        m_all = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        for j in tl.static_range(SPLIT_KV):
            m_j = tl.load(WsMl + (first + j) * 2 * BLOCK_M + offs_r, cache_modifier=".cg")
            m_all = tl.maximum(m_all, m_j)
        total = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        l_all = tl.zeros([BLOCK_M], dtype=tl.float32)
        for j in tl.static_range(SPLIT_KV):
            base = (first + j) * 2 * BLOCK_M
            m_j = tl.load(WsMl + base + offs_r, cache_modifier=".cg")
            l_j = tl.load(WsMl + base + BLOCK_M + offs_r, cache_modifier=".cg")
            acc_j = tl.load(WsAcc + (first + j) * BLOCK_M * HEAD_DIM + offs_r[:, None] * HEAD_DIM
                            + offs_d[None, :], cache_modifier=".cg")
            weight = tl.math.exp2(m_j - m_all)  # an empty split has m_j = -inf: weight 0
            total += acc_j * weight[:, None]
            l_all += l_j * weight
        out = (total / l_all[:, None]).to(Out.dtype.element_ty)
        o_offs = head_off + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        if EVEN_M:
            tl.store(Out + o_offs, out)
        else:
            tl.store(Out + o_offs, out, mask=(offs_m < seq_len)[:, None])
        tl.atomic_xchg(Counters + tile, 0)


@triton.jit
def fa2_fwd_kernel(
    Q, K, V, Out, desc_q, desc_k, desc_v, desc_o, WsAcc, WsMl, Counters,
    seq_len, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
    USE_DESC: tl.constexpr, WARP_SPEC: tl.constexpr, UPCAST_DOT: tl.constexpr,
    SPLIT_KV: tl.constexpr,
):
    """Grid: (ceil(S / BLOCK_M) * SPLIT_KV, B * H). Writes Out[b, h, tile] for one query tile;
    with SPLIT_KV > 1 each program covers 1/SPLIT_KV of the tile's keys (more programs for
    small grids) and the last to finish merges the partials (`_combine_splits`)."""
    num_m = tl.cdiv(seq_len, BLOCK_M)
    if SPLIT_KV == 1:
        pid_m = tl.program_id(0)
        split = 0
    else:
        pid_m = tl.program_id(0) // SPLIT_KV
        split = tl.program_id(0) % SPLIT_KV
    bh = tl.program_id(1)
    if CAUSAL:
        pid_m = num_m - 1 - pid_m  # longest key range first
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    head_off = bh.to(tl.int64) * seq_len * HEAD_DIM  # int64: B*H*S*D may pass 2^31
    row0 = bh * seq_len

    if USE_DESC:
        q = desc_q.load([row0 + start_m, 0])
    else:
        q_offs = head_off + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
        if EVEN_M:
            q = tl.load(Q + q_offs)
        else:
            q = tl.load(Q + q_offs, mask=(offs_m < seq_len)[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if CAUSAL:
        # Key blocks that end at or before the tile's first row are fully visible: no mask.
        diag_lo = (start_m // BLOCK_N) * BLOCK_N
        diag_hi = tl.minimum(start_m + BLOCK_M, seq_len)
        if SPLIT_KV == 1:
            lo = 0
            hi = diag_lo
            band_lo = diag_lo
        else:  # split the unmasked blocks; the last split also takes the diagonal band
            per = tl.cdiv(diag_lo // BLOCK_N, SPLIT_KV) * BLOCK_N
            lo = split * per
            hi = tl.minimum(lo + per, diag_lo)
            band_lo = tl.where(split == SPLIT_KV - 1, diag_lo, diag_hi)
        acc, l_i, m_i = _attend_key_range(
            acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, offs_m, lo, hi, seq_len,
            qk_scale, HEAD_DIM, BLOCK_N, False, False, USE_DESC, WARP_SPEC, UPCAST_DOT)
        # The diagonal band: the only blocks that need the triangular mask; above it, nothing.
        acc, l_i, m_i = _attend_key_range(
            acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, offs_m, band_lo, diag_hi,
            seq_len, qk_scale, HEAD_DIM, BLOCK_N, True, not EVEN_N, USE_DESC, False, UPCAST_DOT)
    else:
        if SPLIT_KV == 1:
            lo = 0
            hi = seq_len
        else:
            per = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), SPLIT_KV) * BLOCK_N
            lo = split * per
            hi = tl.minimum(lo + per, seq_len)
        if EVEN_N:
            acc, l_i, m_i = _attend_key_range(
                acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, offs_m, lo, hi, seq_len,
                qk_scale, HEAD_DIM, BLOCK_N, False, False, USE_DESC, WARP_SPEC, UPCAST_DOT)
        else:  # only the last key block carries the bounds mask
            full_hi = (seq_len // BLOCK_N) * BLOCK_N
            acc, l_i, m_i = _attend_key_range(
                acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, offs_m, lo,
                tl.minimum(hi, full_hi), seq_len, qk_scale, HEAD_DIM, BLOCK_N, False, False,
                USE_DESC, WARP_SPEC, UPCAST_DOT)
            acc, l_i, m_i = _attend_key_range(
                acc, l_i, m_i, q, K, V, desc_k, desc_v, head_off, row0, offs_m,
                tl.maximum(lo, full_hi), hi, seq_len, qk_scale, HEAD_DIM, BLOCK_N, False, True,
                USE_DESC, False, UPCAST_DOT)

    if SPLIT_KV > 1:
        _combine_splits(acc, l_i, m_i, Out, WsAcc, WsMl, Counters, bh * num_m + pid_m, split,
                        head_off, offs_m, seq_len, HEAD_DIM, BLOCK_M, EVEN_M, SPLIT_KV)
    else:
        out = (acc / l_i[:, None]).to(Out.dtype.element_ty)
        if USE_DESC:
            desc_o.store([row0 + start_m, 0], out)
        else:
            o_offs = head_off + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
            if EVEN_M:
                tl.store(Out + o_offs, out)
            else:
                tl.store(Out + o_offs, out, mask=(offs_m < seq_len)[:, None])


def interpreter_needs_upcast(dtype) -> bool:
    """The Triton interpreter (CPU, numpy) returns garbage for bf16 x bf16 dots (seen with
    triton 3.9); there the operands are upcast to fp32 after their bf16 rounding, which is
    exact (bf16 is a subset of fp32), so the result matches a bf16 dot with fp32 accumulate."""
    import torch

    return os.environ.get("TRITON_INTERPRET") == "1" and dtype == torch.bfloat16


def descriptors_fit(seq_len: int, block_m: int, block_n: int) -> bool:
    """Whether the TMA path is exact: no tile of the (B*H*S, D) view may straddle two heads."""
    return seq_len % block_m == 0 and seq_len % block_n == 0


class Fa2Launch(Protocol):
    """make_launcher's result: a zero-argument launch (it returns `out`), and `compiled_resources()`."""

    compiled_resources: Callable[[], dict]

    def __call__(self) -> Any: ...


def make_launcher(q, k, v, out, causal: bool, config) -> Fa2Launch:
    """Return a zero-argument callable that runs the kernel once, writing into `out`.

    Everything that does not change between calls (descriptors, grid, scale, flags) is built
    here, so a call is one Triton launch. `config` is a `kernels.triton.configs.BlockConfig`.
    """
    batch, heads, seq_len, head_dim = q.shape
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if tuple(t.shape) != (batch, heads, seq_len, head_dim) or not t.is_contiguous():
            raise ValueError(f"triton_fa2: {name} must be contiguous {tuple(q.shape)}, got "
                             f"{tuple(t.shape)} contiguous={t.is_contiguous()}")
    if batch * heads > MAX_GRID_Y:
        raise ValueError(f"triton_fa2: B*H = {batch * heads} exceeds the CUDA grid's y limit "
                         f"({MAX_GRID_Y}), where (batch, head) is laid out")
    bm, bn = config.block_m, config.block_n
    use_desc = bool(config.tma)
    if use_desc and not descriptors_fit(seq_len, bm, bn):
        raise ValueError(f"triton_fa2: TMA config {config.name!r} needs S % {bm} == 0 and "
                         f"S % {bn} == 0, got S={seq_len}")
    if use_desc and any(t.data_ptr() % 16 for t in (q, k, v, out)):
        raise ValueError(f"triton_fa2: TMA config {config.name!r} needs 16-byte aligned tensors")
    descs = (None, None, None, None)
    if use_desc:
        from triton.tools.tensor_descriptor import TensorDescriptor

        rows = batch * heads * seq_len
        descs = tuple(
            TensorDescriptor(t.view(rows, head_dim), [rows, head_dim], [head_dim, 1], [blk, head_dim])
            for t, blk in ((q, bm), (k, bn), (v, bn), (out, bm))
        )
    qk_scale = LOG2_E / math.sqrt(head_dim)
    split = int(config.split_kv)
    num_m = triton.cdiv(seq_len, bm)
    workspace: tuple[Any, Any, Any] = (None, None, None)
    if split > 1:
        import torch

        tiles = batch * heads * num_m
        workspace = (
            torch.empty(tiles * split * bm * head_dim, dtype=torch.float32, device=q.device),
            torch.empty(tiles * split * 2 * bm, dtype=torch.float32, device=q.device),
            torch.zeros(tiles, dtype=torch.int32, device=q.device),  # reset by each launch's last split
        )
    grid = (num_m * split, batch * heads)
    kernel = fa2_fwd_kernel[grid]
    meta = dict(
        HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal),
        EVEN_M=seq_len % bm == 0, EVEN_N=seq_len % bn == 0,
        USE_DESC=use_desc, WARP_SPEC=bool(config.warp_specialize),
        UPCAST_DOT=interpreter_needs_upcast(q.dtype), SPLIT_KV=split,
        num_warps=config.num_warps, num_stages=config.num_stages, **COMPILE_OPTIONS,
    )

    def run():
        kernel(q, k, v, out, *descs, *workspace, seq_len, qk_scale, **meta)
        return out

    def compiled_resources() -> dict:
        """Launch once and return what the compiler reported for the kernel it ran: registers
        per thread, spilled registers, shared memory and the sha256 of its cubin (GPU only;
        Triton returns the handle, whose `asm` holds the binary its cache keeps as a file)."""
        handle = kernel(q, k, v, out, *descs, *workspace, seq_len, qk_scale, **meta)
        metadata = getattr(handle, "metadata", None)
        cubin = (getattr(handle, "asm", None) or {}).get("cubin")
        return {
            "registers_per_thread": getattr(handle, "n_regs", None),
            "spilled_registers": getattr(handle, "n_spills", None),
            "shared_mem_bytes": getattr(metadata, "shared", None),
            "binary_sha256": hashlib.sha256(cubin).hexdigest() if isinstance(cubin, bytes) else None,
        }

    launch = cast(Fa2Launch, run)  # once compiled_resources is set
    launch.compiled_resources = compiled_resources
    return launch
