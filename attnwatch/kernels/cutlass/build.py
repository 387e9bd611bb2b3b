"""Building the CUTLASS 3-kernel libraries through kernels.nvcc, and their build reports.

One shared library per tile configuration (both fp16 and bf16 inside), compiled for
``sm_90a`` (wgmma and TMA need the architecture-specific target) with
``--expt-relaxed-constexpr -std=c++17`` as CUTLASS 3.x requires, through the project's one
nvcc pipeline: cached by the source, every reachable header (CUTLASS's included, so a new
CUTLASS version rebuilds), the flags and the nvcc version.

The build report records what ptxas said about every kernel in the library (the two GEMMs
and the softmax, per dtype) and what the library says about its GEMMs at compile time
(dynamic shared memory, pipeline stages, threads per CTA): CUTLASS kernels take all their
shared memory dynamically, so ptxas alone would report 0 bytes. The record names the
headers by their version (`-I<cutlass-4.2.0>`), not by where this machine keeps them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ..build_report import BuildReport
from .configs import TileConfig
from .headers import cutlass_include_dir, cutlass_version
from ..record_paths import Names
from ..nvcc import NvccError, NvccResult, failed_build_report, nvcc_compile, parse_ptxas_verbose

SOURCE = Path(__file__).resolve().with_name("attention_3k.cu")
ARCH = "sm_90a"
# -O3 also optimises the host side (argument setup, launch); NDEBUG drops CUTLASS's host asserts.
BASE_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-O3", "-DNDEBUG")
DTYPE_CODES = {"fp16": 0, "bf16": 1}

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def flags_for(config: TileConfig) -> list[str]:
    return [*BASE_FLAGS, *config.defines()]


def include_names(include: Path | None) -> Names:
    """How the build record names the header folder: by the CUTLASS version it holds."""
    if include is None:
        return {}
    try:
        return {include: f"<cutlass-{cutlass_version(include)}>"}
    except (OSError, ValueError):
        return {include: "<cutlass>"}


def build_library(config: TileConfig, cache_dir: Path | None = None) -> NvccResult:
    """Compile (or fetch from the cache) the library of `config`.

    Raises NvccError naming the source with nvcc's log tail, also when no headers are found.
    Builds of one configuration are serialised within a process; different ones may run in
    parallel threads (nvcc runs as a subprocess).
    """
    include = cutlass_include_dir()
    if include is None:
        raise NvccError([SOURCE], "CUTLASS headers not found (pip install nvidia-cutlass, or set $CUTLASS_INCLUDE_DIR)")
    with _locks_guard:
        lock = _locks.setdefault(config.name, threading.Lock())
    with lock:
        return nvcc_compile(
            [SOURCE],
            output="shared",
            arch=ARCH,
            flags=flags_for(config),
            include_dirs=[include],
            cache_dir=cache_dir,
            include_names=include_names(include),
        )


def kernel_role(mangled: str) -> str:
    """A short label for a kernel of the library, from its mangled name: "softmax[fp16]",
    "gemm[bf16]". The two GEMMs of a dtype differ only deep inside their template arguments,
    so the report numbers them (#1, #2) and takes the per-GEMM facts (which one is Q·Kᵀ)
    from the library itself (`gemm_facts`)."""
    dtype = "bf16" if "bfloat16" in mangled else "fp16" if "half" in mangled else "?"
    if "masked_row_softmax" in mangled:
        return f"softmax[{dtype}]"
    if "device_kernel" in mangled:
        return f"gemm[{dtype}]"
    return mangled[:60]


def _ptxas_kernels(log: str) -> list[dict[str, Any]]:
    kernels = []
    counts: dict[str, int] = {}
    for name, usage in sorted(parse_ptxas_verbose(log).items()):
        role = kernel_role(name)
        counts[role] = counts.get(role, 0) + 1
        label = role if role.startswith("softmax") else f"{role}#{counts[role]}"
        kernels.append(
            {
                "kernel": label,
                "registers": usage.registers,
                "static_smem_bytes": usage.shared_mem_bytes,
                "spill_store_bytes": usage.spill_store_bytes,
                "spill_load_bytes": usage.spill_load_bytes,
                "stack_frame_bytes": usage.stack_frame_bytes,
            }
        )
    return kernels


def report_for(config: TileConfig, result: NvccResult, gemm_facts: dict[str, dict[str, int]] | None) -> BuildReport:
    """The BuildReport of a successful build.

    registers_per_thread is the largest over the library's kernels (the GEMM consumers set
    occupancy), shared_mem_bytes the largest dynamic shared memory of the GEMMs (None when
    the library could not be asked), spills the sums over all kernels.
    """
    kernels = _ptxas_kernels(result.log)
    include = cutlass_include_dir()
    config_info: dict[str, Any] = {
        **config.describe(),
        "cutlass_version": cutlass_version(include) if include is not None else None,
        "kernels": kernels,
        "command": " ".join(result.command),
    }
    if gemm_facts is not None:
        config_info["gemms"] = gemm_facts
    if not kernels:
        return BuildReport(
            variant=config.variant_name,
            ok=False,
            target=ARCH,
            compile_seconds=result.compile_seconds,
            source_hash=result.source_hash,
            cached=result.cached,
            config=config_info,
            log_tail=result.log[-4000:],
            error="no kernels in the ptxas report",
        )
    smem = max((f["smem_bytes"] for f in gemm_facts.values()), default=None) if gemm_facts else None
    return BuildReport(
        variant=config.variant_name,
        ok=True,
        target=ARCH,
        compile_seconds=result.compile_seconds,
        registers_per_thread=max(k["registers"] for k in kernels),
        shared_mem_bytes=smem,
        spill_store_bytes=sum(k["spill_store_bytes"] for k in kernels),
        spill_load_bytes=sum(k["spill_load_bytes"] for k in kernels),
        stack_frame_bytes=max(k["stack_frame_bytes"] for k in kernels),
        source_hash=result.source_hash,
        cached=result.cached,
        config=config_info,
        log_tail=result.log[-4000:],
    )


def build_and_report(config: TileConfig, cache_dir: Path | None = None) -> BuildReport:
    """Build `config` and describe it; a failed build gives ok=False with nvcc's log tail."""
    from .library import Attention3kLibrary

    try:
        result = build_library(config, cache_dir)
    except NvccError as exc:
        return failed_build_report(config.variant_name, exc, ARCH, include_names(cutlass_include_dir()))
    library = Attention3kLibrary(result.path)
    return report_for(config, result, library.gemm_facts())
