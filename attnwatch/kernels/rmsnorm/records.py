"""What the RMSNorm variants share: their record construction, inputs of a case, and the
shape and dtype rules.

`variant_record` builds a `kernels.variant.Variant` of the operator (`Variant.operator` =
"rmsnorm"); a variant's `Prepared.inputs` are (x, w), the order model.reference64 takes them.
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from ..variant import Variant
from .model import MODES, make_inputs
from .shapes import RowsShape

OPERATOR = "rmsnorm"
SUPPORTED_DTYPES = ("fp16", "bf16")


def variant_record(**values: Any) -> Variant:
    """A Variant of the rmsnorm operator."""
    return Variant(operator=OPERATOR, **values)


def rmsnorm_case(variant: str, shape: Any, dtype: str) -> Case:
    """A forward case of an RMSNorm variant (mode "fwd", RMSNorm's only one)."""
    return Case(variant=variant, shape=shape, dtype=dtype, mode=MODES[0], operator=OPERATOR)


def case_inputs(case: Case, device: Any, seed: int) -> tuple[Any, Any]:
    """(x, w) of `case` (kernels/rmsnorm/model.py `make_inputs`)."""
    return make_inputs(case.shape, case.dtype, case.mode, device, seed)


def dtype_unsupported(case: Case) -> str | None:
    """The shape type and dtype rule of every RMSNorm variant: a reason, never an exception,
    for a case of another operator's shape."""
    if not isinstance(case.shape, RowsShape):
        return f"shape {getattr(case.shape, 'id', case.shape)!r} is not an RMSNorm (rows x hidden) shape"
    if case.dtype not in SUPPORTED_DTYPES:
        return f"only fp16 and bf16 are measured; got {case.dtype}"
    return None


def row_kernel_unsupported(case: Case, max_hidden: int, why: str) -> str | None:
    """The dtype rule, and the row length limit of a kernel that holds a whole row per program."""
    reason = dtype_unsupported(case)
    if reason is None and case.shape.hidden > max_hidden:
        reason = f"hidden {case.shape.hidden} exceeds {max_hidden}: {why}"
    return reason
