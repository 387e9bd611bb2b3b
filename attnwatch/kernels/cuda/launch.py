"""Build, load and launch the hand-written CUDA attention kernels (cuda_scalar, cuda_wmma,
cuda_wmma_cpasync).

Each variant is one `.cu` source in this folder with one `extern "C"` entry per head dim and
dtype, e.g. `attn_wmma_d64_fp16`; the entry's launch geometry is described here (`KernelSpec`),
its dynamic shared memory is the number the source stores in the cubin (`<entry>_smem_bytes`),
and the kernel traps when given less shared memory than its layout needs.

The sources are compiled by `kernels.nvcc` for the device's own compute capability (`sm_90` on
Hopper) or, on a host without a GPU, for `sm_90`, so that CI can still check that every kernel
builds and what ptxas says about it. torch and cupy are imported lazily.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from ..build_report import BuildReport
from ..cubin_symbols import int_symbol
from ..nvcc import CubinKernel, NvccResult, build_report, nvcc_compile, parse_ptxas_verbose, sm_arch

SOURCE_DIR = Path(__file__).resolve().parent
HEAD_DIMS = (64, 128)
DTYPES = ("fp16", "bf16")
# Without a GPU, compile for the GPU the benchmarks run on (H100/H200).
OFFLINE_ARCH = "sm_90"


@dataclass(frozen=True)
class KernelSpec:
    """One variant's source and launch geometry.

    rows_per_block: query rows one CTA covers (grid.y = ceil(S / rows_per_block));
    threads: CTA size; load_stages: K/V buffers of a WMMA kernel (0 = static smem only).
    """

    variant: str
    source: str
    entry_prefix: str
    rows_per_block: int
    threads: int
    load_stages: int
    description: str

    @property
    def path(self) -> Path:
        return SOURCE_DIR / self.source

    def entry(self, head_dim: int, dtype: str) -> str:
        return f"{self.entry_prefix}_d{head_dim}_{dtype}"

    def entries(self) -> list[str]:
        return [self.entry(d, t) for d in HEAD_DIMS for t in DTYPES]

    def dynamic_smem_bytes(self, cubin: Path, entry: str) -> int:
        """The dynamic shared memory `entry` needs, as its source computed it: the cubin's
        `<entry>_smem_bytes` (WmmaSmem<D, LOAD_STAGES>::TOTAL in wmma_attention.cuh); 0 for
        static-only kernels. Read, not mirrored: a copy of the formula here went stale when the
        source's padding changed, and the kernel trapped on the smaller launch."""
        if self.load_stages == 0:
            return 0
        return int_symbol(cubin, f"{entry}_smem_bytes")


SPECS: dict[str, KernelSpec] = {
    spec.variant: spec
    for spec in (
        KernelSpec(
            "cuda_scalar",
            "cuda_scalar.cu",
            "attn_scalar",
            rows_per_block=8,
            threads=256,
            load_stages=0,
            description="fused online-softmax forward, FP32 scalar math, one warp per query row",
        ),
        KernelSpec(
            "cuda_wmma",
            "cuda_wmma.cu",
            "attn_wmma",
            rows_per_block=64,
            threads=128,
            load_stages=1,
            description="fused forward, WMMA tensor cores for QK^T and PV, streaming fp32 softmax, 64x64 tiles",
        ),
        KernelSpec(
            "cuda_wmma_cpasync",
            "cuda_wmma_cpasync.cu",
            "attn_wmma_cpasync",
            rows_per_block=64,
            threads=128,
            load_stages=2,
            description="cuda_wmma with 2-stage cp.async K/V loads overlapping compute",
        ),
    )
}


def unsupported_reason(variant: str, head_dim: int, dtype: str) -> str | None:
    """Why a (head_dim, dtype) combination has no kernel, or None."""
    if dtype not in DTYPES:
        return f"{variant} is instantiated for {' and '.join(DTYPES)} only; got {dtype}"
    if head_dim not in HEAD_DIMS:
        return (
            f"{variant} is instantiated for head_dim in {HEAD_DIMS} (register-resident tiles are "
            f"sized at compile time); got {head_dim}"
        )
    return None


def target_arch() -> str:
    """The device's own `sm_XY` when torch sees a CUDA device, else OFFLINE_ARCH."""
    import torch

    if torch.cuda.is_available():
        return sm_arch("{}.{}".format(*torch.cuda.get_device_capability()))
    return OFFLINE_ARCH


def build(variant: str, arch: str | None = None, cache_dir: Path | None = None) -> NvccResult:
    """Compile (through the nvcc cache) the variant's source for `arch` (default: target_arch())."""
    spec = SPECS[variant]
    return nvcc_compile([spec.path], output="cubin", arch=arch or target_arch(), cache_dir=cache_dir)


def variant_build_report(variant: str, arch: str | None = None, cache_dir: Path | None = None) -> BuildReport:
    """The variant's BuildReport: headline numbers from its d64/fp16 entry (the most-run case),
    and every entry's registers, smem and spills in `config["kernels"]`; ok only when every
    entry is in the ptxas report."""
    spec = SPECS[variant]
    result = build(variant, arch, cache_dir)
    report = build_report(variant, result, spec.entry(64, "fp16"))
    if report.shared_mem_bytes is not None:  # static (ptxas) + dynamic (the launch): smem per CTA
        report.shared_mem_bytes += spec.dynamic_smem_bytes(result.path, spec.entry(64, "fp16"))
    usages = parse_ptxas_verbose(result.log)
    missing = [name for name in spec.entries() if name not in usages]
    report.config["kernels"] = {
        name: {
            "registers": usages[name].registers,
            "static_smem_bytes": usages[name].shared_mem_bytes,
            "dynamic_smem_bytes": spec.dynamic_smem_bytes(result.path, name),
            "spill_store_bytes": usages[name].spill_store_bytes,
            "spill_load_bytes": usages[name].spill_load_bytes,
            "stack_frame_bytes": usages[name].stack_frame_bytes,
        }
        for name in spec.entries()
        if name in usages
    }
    report.config["threads_per_block"] = spec.threads
    if missing and report.ok:
        report.ok = False
        report.error = f"entries missing from the ptxas report: {', '.join(missing)}"
    return report


@functools.lru_cache(maxsize=None)
def _load(path: str, entry: str, dynamic_smem_bytes: int) -> CubinKernel:
    return CubinKernel(Path(path), entry, dynamic_smem_bytes=dynamic_smem_bytes)


def _check_tensor(name: str, tensor: Any, like: Any) -> None:
    import torch

    if not isinstance(tensor, torch.Tensor) or not tensor.is_cuda:
        raise ValueError(f"{name}: expected a CUDA tensor")
    if tensor.shape != like.shape or tensor.dtype != like.dtype:
        raise ValueError(
            f"{name}: shape/dtype {tuple(tensor.shape)}/{tensor.dtype} differ from q's {tuple(like.shape)}/{like.dtype}"
        )
    if not tensor.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (B, H, S, D)")
    if tensor.data_ptr() % 16:
        raise ValueError(f"{name}: data pointer must be 16-byte aligned for vector loads")


class CudaLaunch(Protocol):
    """make_launcher's result: a zero-argument launch (it returns `out`) that names what it launches."""

    grid: tuple[int, int, int]
    entry: str
    cubin: Path
    dynamic_smem_bytes: int  # what the launch passes, read once from the cubin

    def __call__(self) -> Any: ...


def make_launcher(variant: str, q: Any, k: Any, v: Any, out: Any, causal: bool) -> CudaLaunch:
    """Compile/load once and return a zero-argument launch writing into `out` (returns `out`).

    Nothing but the kernel launch happens in the returned callable; it runs on torch's
    current stream. Raises ValueError for tensors outside the layout convention.
    """
    import numpy as np
    import torch

    spec = SPECS[variant]
    if q.dim() != 4:
        raise ValueError(f"q: expected (B, H, S, D), got shape {tuple(q.shape)}")
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        _check_tensor(name, tensor, q)
    batch, heads, seq_len, head_dim = q.shape
    dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(q.dtype, str(q.dtype))
    reason = unsupported_reason(variant, head_dim, dtype)
    if reason:
        raise ValueError(reason)
    if batch * heads > 2**31 - 1 or math.ceil(seq_len / spec.rows_per_block) > 65535:
        raise ValueError(f"{variant}: grid too large for B*H={batch * heads}, S={seq_len}")
    result = build(variant)
    entry = spec.entry(head_dim, dtype)
    kernel = _load(str(result.path), entry, spec.dynamic_smem_bytes(result.path, entry))
    grid = (batch * heads, math.ceil(seq_len / spec.rows_per_block), 1)
    block = (spec.threads, 1, 1)
    scale_log2 = np.float32((1.0 / math.sqrt(head_dim)) * math.log2(math.e))
    args = (q, k, v, out, np.int32(seq_len), scale_log2, np.int32(1 if causal else 0))

    bound = kernel.bind(grid, block, args)

    def launch() -> Any:
        bound()
        return out

    named = cast(CudaLaunch, launch)  # once the attributes below are set
    named.grid = grid
    named.entry = kernel.name
    named.cubin = result.path
    named.dynamic_smem_bytes = kernel.dynamic_smem_bytes
    return named
