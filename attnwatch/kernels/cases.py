"""A case: (variant, shape, dtype, mode) of one operator, with its stable text id.

The mode is the fourth part of the id: attention's is "causal" or "noncausal" (kept as the
`causal` flag too, which every attention variant reads); another operator's are its own
(kernels.operators.Operator.modes, e.g. RMSNorm's "fwd"). `Case(variant, shape, dtype, causal)`
still builds an attention case, as every revision's harness calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPES = ("fp16", "bf16")
ATTENTION_MODES = ("causal", "noncausal")


@dataclass(frozen=True, init=False)
class Case:
    variant: str
    shape: Any  # the operator's shape type (attention: kernels.shapes.Shape)
    dtype: str
    causal: bool  # attention's flag; False for another operator
    mode: str  # attention's "causal" or "noncausal", another operator's own mode
    operator: str = "attention"

    def __init__(
        self,
        variant: str,
        shape: Any,
        dtype: str,
        causal: bool | None = None,
        mode: str | None = None,
        operator: str = "attention",
    ) -> None:
        """An attention case takes `causal` or `mode` (both: they must agree); another operator's its mode.
        Written out rather than generated so that `causal` and `mode` are always set once built."""
        for name, value in (("variant", variant), ("shape", shape), ("dtype", dtype), ("operator", operator)):
            object.__setattr__(self, name, value)
        if self.dtype not in DTYPES + ("fp32",):
            raise ValueError(f"case {self.variant}/{self.shape.id}: unknown dtype {self.dtype!r}")
        if self.operator == "attention":
            if mode is None and causal is None:
                raise ValueError(f"case {self.variant}/{self.shape.id}: an attention case needs causal or mode")
            mode = mode if mode is not None else mode_name(bool(causal))
            if mode not in ATTENTION_MODES or (causal is not None and (mode == "causal") != bool(causal)):
                raise ValueError(
                    f"case {self.variant}/{self.shape.id}: attention mode {mode!r} does not match causal={causal!r}"
                )
            object.__setattr__(self, "mode", mode)
            object.__setattr__(self, "causal", mode == "causal")
        else:
            if not mode:
                raise ValueError(f"case {self.variant}/{self.shape.id}: a {self.operator} case needs its mode")
            object.__setattr__(self, "mode", mode)
            object.__setattr__(self, "causal", False)

    @property
    def id(self) -> str:
        """Stable text id, e.g. `triton_fa2/b4_h16_s1k/fp16/causal`."""
        return case_id(self.variant, self.shape.id, self.dtype, self.mode)

    @property
    def flops(self) -> float:
        """FLOPs of one call, by the operator's model (kernels.operators)."""
        from .operators import get_operator

        return get_operator(self.operator).flops(self.shape, self.mode)

    @property
    def bytes(self) -> float:
        """Minimum DRAM bytes of one call, by the operator's model (kernels.operators)."""
        from .operators import get_operator

        return get_operator(self.operator).bytes(self.shape, self.dtype, self.mode)


def mode_name(causal: bool) -> str:
    """Attention's mode of a causal flag."""
    return "causal" if causal else "noncausal"


def case_id(variant: str, shape_id: str, dtype: str, mode: str | bool) -> str:
    """`variant/shape/dtype/mode`; a bool mode is attention's causal flag (the harness API's form)."""
    return f"{variant}/{shape_id}/{dtype}/{mode_name(mode) if isinstance(mode, bool) else mode}"


def parse_case_id(text: str) -> tuple[str, str, str, str]:
    """Inverse of `case_id` (`attnwatch bisect --case`): (variant, shape id, dtype, mode), the mode
    one of a registered operator's; raises ValueError naming the bad part."""
    from .operators import all_operators

    modes = sorted({m for op in all_operators() for m in op.modes})
    parts = text.split("/")
    if len(parts) != 4 or parts[3] not in modes:
        raise ValueError(f"not a case id (variant/shape/dtype/{'|'.join(modes)}): {text!r}")
    return parts[0], parts[1], parts[2], parts[3]
