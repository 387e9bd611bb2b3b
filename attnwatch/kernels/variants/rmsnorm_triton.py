"""`rmsnorm_triton`: this project's own Triton RMSNorm forward (kernels/rmsnorm/triton_kernel.py).

`prepare` draws the inputs, fixes the launch configuration from the row length
(kernels/rmsnorm/triton_config.py), compiles and runs the kernel once, all outside the timed
region; the callable is one kernel launch into the preallocated `out`. Runs on CPU tensors
under TRITON_INTERPRET=1 for small problems (the tests do).
"""

from __future__ import annotations

import os
from typing import Any

from ..cases import Case
from ..rmsnorm.model import EPS, make_output
from ..rmsnorm.records import case_inputs, row_kernel_unsupported, variant_record
from ..rmsnorm.triton_config import INTERPRETER_MAX_ELEMENTS, INTERPRETER_REASON, MAX_HIDDEN
from ..variant import Prepared


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _unsupported(case: Case) -> str | None:
    reason = row_kernel_unsupported(case, MAX_HIDDEN, "one program holds a whole row in registers")
    if reason:
        return reason
    shape = case.shape
    if _interpreting() and shape.elements > INTERPRETER_MAX_ELEMENTS:
        return (
            f"TRITON_INTERPRET=1: rows*hidden = {shape.elements} exceeds "
            f"{INTERPRETER_MAX_ELEMENTS}; {INTERPRETER_REASON}"
        )
    return None


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    from ..rmsnorm.triton_kernel import make_launcher

    reason = _unsupported(case)
    if reason:
        raise ValueError(f"{case.id}: unsupported: {reason}")
    x, w = case_inputs(case, device, seed)
    out = make_output(x)
    run = make_launcher(x, w, out, EPS)
    run()  # compiles: the first launch stays out of the timed calls
    if x.is_cuda:
        import torch

        torch.cuda.synchronize(x.device)
    config = run.config
    info = {"block_n": config.block_n, "num_warps": config.num_warps, "interpreter": _interpreting()}
    return Prepared(fn=run, inputs=(x, w), out=out, info=info, config=config.name, config_source="fixed")


RMSNORM_TRITON = variant_record(
    name="rmsnorm_triton",
    family="triton",
    description="RMSNorm forward in Triton: one program per row, fp32 sum of squares, one pass over x",
    prepare=_prepare,
    needs=frozenset({"triton"}),
    unsupported=_unsupported,
    lineage="own Triton RMSNorm",
)

VARIANTS = (RMSNORM_TRITON,)
