"""`rmsnorm_liger`: Liger-Kernel's Triton RMSNorm forward, a reference of the rmsnorm operator.

Called as a model using `LigerRMSNorm` runs it: `LigerRMSNormFunction.apply` with Liger's
default casting mode "llama" (1/rms in fp32, x * (1/rms) rounded to the input dtype before
the weight multiply, as Hugging Face's Llama does) and no weight offset. Liger allocates the
output and stores the per-row 1/rms on every call (for its backward): both stay in the timed
call, because that is what the library costs. Needs the `liger-kernel` package (need
"liger", kernels/optional_packages.py), Triton and a CUDA device: Liger 0.8.5's kernel does
not run under TRITON_INTERPRET=1 (it calls `.to()` on the scalar eps, a Python float there).
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from ..rmsnorm.model import EPS
from ..rmsnorm.records import case_inputs, row_kernel_unsupported, variant_record
from ..variant import Prepared

CASTING_MODE = "llama"
MAX_HIDDEN = 65536  # Liger's MAX_FUSED_SIZE: one program holds a row


def _unsupported(case: Case) -> str | None:
    return row_kernel_unsupported(case, MAX_HIDDEN, "Liger's limit (one program holds a row)")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("liger-kernel")
    except PackageNotFoundError:  # importable from a folder without its dist-info
        return "unknown"


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    import torch
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x, w = case_inputs(case, device, seed)

    def run() -> Any:
        return LigerRMSNormFunction.apply(x, w, EPS, 0.0, CASTING_MODE, False)

    run()  # compiles: the first launch stays out of the timed calls
    torch.cuda.synchronize(x.device)
    info = {"liger_kernel": _version(), "casting_mode": CASTING_MODE}
    return Prepared(fn=run, inputs=(x, w), info=info)


RMSNORM_LIGER = variant_record(
    name="rmsnorm_liger",
    family="triton",
    description="Liger-Kernel's Triton RMSNorm forward (casting mode llama; also stores 1/rms per row)",
    prepare=_prepare,
    needs=frozenset({"cuda", "triton", "liger"}),
    unsupported=_unsupported,
    lineage="Liger-Kernel",
)

VARIANTS = (RMSNORM_LIGER,)
