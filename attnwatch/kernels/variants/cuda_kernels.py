"""The hand-written CUDA variants: `cuda_scalar`, `cuda_wmma`, `cuda_wmma_cpasync`.

Sources, launch geometry and the build live in kernels/cuda; this module only declares the
variants (what they need, which cases they do not cover and why) and wires `prepare`:
inputs from kernels.inputs, the cubin compiled (nvcc cache) and loaded outside the timed
region, and a zero-argument launcher that writes into the preallocated `Prepared.out`, so
the correctness suite can poison it before each call.
"""

from __future__ import annotations

from typing import Any

from ..build_report import BuildReport
from ..cases import Case
from ..cuda.launch import SPECS, make_launcher, target_arch, unsupported_reason, variant_build_report
from ..inputs import make_inputs, make_output
from ..nvcc import NvccError, failed_build_report
from ..variant import Prepared, Variant

NEEDS = frozenset({"cuda", "nvcc", "cupy"})
LINEAGE = {
    "cuda_scalar": "Phase 1 CUDA baseline; V2c-v3 scalar",
    "cuda_wmma": "V2c-v6a Full WMMA",
    "cuda_wmma_cpasync": "V2c-v7a cp.async",
}


def _unsupported_for(variant: str):
    def unsupported(case: Case) -> str | None:
        return unsupported_reason(variant, case.shape.head_dim, case.dtype)

    return unsupported


def _prepare_for(variant: str):
    def prepare(case: Case, device: Any, seed: int) -> Prepared:
        q, k, v = make_inputs(case, device, seed)
        out = make_output(case, device)
        launch = make_launcher(variant, q, k, v, out, case.causal)
        info = {
            "entry": launch.entry,
            "grid": list(launch.grid),
            "cubin": launch.cubin.name,
            "threads_per_block": SPECS[variant].threads,
            "dynamic_smem_bytes": launch.dynamic_smem_bytes,
        }
        return Prepared(fn=launch, q=q, k=k, v=v, out=out, info=info)

    return prepare


def _build_for(variant: str):
    def build() -> BuildReport:
        arch = target_arch()
        try:
            return variant_build_report(variant, arch)
        except NvccError as exc:
            return failed_build_report(variant, exc, arch)

    return build


VARIANTS = tuple(
    Variant(
        name=_name,
        family="cuda",
        description=_spec.description,
        prepare=_prepare_for(_name),
        needs=NEEDS,
        unsupported=_unsupported_for(_name),
        build=_build_for(_name),
        lineage=LINEAGE[_name],
    )
    for _name, _spec in SPECS.items()
)
