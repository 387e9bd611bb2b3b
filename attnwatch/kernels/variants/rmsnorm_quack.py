"""`rmsnorm_quack`: quack's CuTe-DSL RMSNorm forward, a reference of the rmsnorm operator.

Called through quack's public `rmsnorm(x, w, eps=...)` (quack/rmsnorm.py, exported as
`quack.rmsnorm`); without gradients it stores no per-row 1/rms. The first call JIT-compiles
the kernel for the dtype and row length (seconds, cached per process): `prepare` makes it,
so timed calls are launches. quack allocates the output on every call, which stays in the
timed call. Needs a Hopper GPU and the
`quack-kernels` package with its CUTLASS DSL (`nvidia-cutlass-dsl`; need "quack",
kernels/optional_packages.py).
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from ..rmsnorm.model import EPS
from ..rmsnorm.records import case_inputs, dtype_unsupported, variant_record
from ..variant import Prepared


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    import quack
    import torch
    from quack.rmsnorm import rmsnorm  # the function; `quack.rmsnorm` also names the submodule

    x, w = case_inputs(case, device, seed)

    def run() -> Any:
        return rmsnorm(x, w, eps=EPS)

    run()  # JIT-compiles for this dtype and row length
    torch.cuda.synchronize(x.device)
    info = {"quack": getattr(quack, "__version__", "?")}
    return Prepared(fn=run, inputs=(x, w), info=info)


RMSNORM_QUACK = variant_record(
    name="rmsnorm_quack",
    family="cutlass",
    description="quack's CuTe-DSL RMSNorm forward (quack.rmsnorm)",
    prepare=_prepare,
    needs=frozenset({"hopper", "quack"}),
    unsupported=dtype_unsupported,
    lineage="quack (CuTe DSL)",
)

VARIANTS = (RMSNORM_QUACK,)
