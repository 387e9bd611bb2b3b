"""`rmsnorm_torch`: `torch.nn.functional.rms_norm`, the baseline of the rmsnorm operator.

Every gap of an RMSNorm case is taken against this variant (kernels/rmsnorm/model.py
`make_operator`: baseline "rmsnorm_torch"): it is what a model gets without a custom kernel.
torch allocates the output on each call, so there is no `Prepared.out`; the allocation is
part of what a user of the function pays and stays in the timed call.
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from ..rmsnorm.model import EPS
from ..rmsnorm.records import case_inputs, dtype_unsupported, variant_record
from ..variant import Prepared


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    import torch
    import torch.nn.functional as F

    x, w = case_inputs(case, device, seed)
    hidden = (x.shape[-1],)

    def run() -> Any:
        return F.rms_norm(x, hidden, w, EPS)

    return Prepared(fn=run, inputs=(x, w), info={"torch": torch.__version__})


RMSNORM_TORCH = variant_record(
    name="rmsnorm_torch",
    family="torch",
    description="torch.nn.functional.rms_norm (the rmsnorm operator's baseline)",
    prepare=_prepare,
    unsupported=dtype_unsupported,
    lineage="PyTorch RMSNorm",
)

VARIANTS = (RMSNORM_TORCH,)
