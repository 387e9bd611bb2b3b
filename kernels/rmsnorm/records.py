"""What the RMSNorm variants share: their record construction, inputs of a case, and the
shape and dtype rules.

`variant_record` and `prepared_record` build `kernels.variant.Variant` / `Prepared` with
the operator fields (`Variant.operator`, `Prepared.inputs`) when those records have them,
and without them on a tree where they are not there yet, so the variant modules are written
once against the operator API (kernels/operators.py) and import either way.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable

from ..cases import Case
from ..variant import Prepared, Variant
from .model import MODES, make_inputs
from .shapes import RowsShape

OPERATOR = "rmsnorm"
SUPPORTED_DTYPES = ("fp16", "bf16")


def variant_record(**values: Any) -> Variant:
    """A Variant of the rmsnorm operator; `operator` is dropped where Variant lacks the field."""
    known = {f.name for f in fields(Variant)}
    values["operator"] = OPERATOR
    return Variant(**{k: v for k, v in values.items() if k in known})


def prepared_record(fn: Callable[[], Any], inputs: tuple[Any, Any], out: Any | None = None,
                    info: dict[str, Any] | None = None, config: str | None = None,
                    config_source: str | None = None) -> Prepared:
    """A Prepared of (x, w): as `inputs` where Prepared has that field, else in q (x) and k (w)."""
    extra: dict[str, Any] = {"out": out, "info": info or {}, "config": config, "config_source": config_source}
    if "inputs" in {f.name for f in fields(Prepared)}:
        return Prepared(fn=fn, inputs=inputs, **extra)  # type: ignore[call-arg]
    return Prepared(fn, inputs[0], inputs[1], None, **extra)


def prepared_inputs(prepared: Prepared) -> tuple[Any, Any]:
    """(x, w) of a Prepared made by `prepared_record`, whichever layout Prepared has."""
    inputs = getattr(prepared, "inputs", None)
    return tuple(inputs) if inputs is not None else (prepared.q, prepared.k)


def rmsnorm_case(variant: str, shape: Any, dtype: str) -> Case:
    """A forward case of an RMSNorm variant: mode "fwd" where Case has modes, and causal False
    (which means nothing to RMSNorm) where Case still has that field."""
    names = {f.name for f in fields(Case)}
    extra: dict[str, Any] = {}
    if "mode" in names:
        extra["mode"] = MODES[0]
    if "causal" in names:
        extra["causal"] = False
    return Case(variant=variant, shape=shape, dtype=dtype, **extra)


def case_mode(case: Case) -> str:
    """The case's mode ("fwd", RMSNorm's only one); a Case without the field is forward."""
    return getattr(case, "mode", None) or MODES[0]


def case_inputs(case: Case, device: Any, seed: int) -> tuple[Any, Any]:
    """(x, w) of `case` (kernels/rmsnorm/model.py `make_inputs`)."""
    return make_inputs(case.shape, case.dtype, case_mode(case), device, seed)


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
