"""A case: (variant, shape, dtype, causal), with its stable text id."""

from __future__ import annotations

from dataclasses import dataclass

from .shapes import Shape

DTYPES = ("fp16", "bf16")


@dataclass(frozen=True)
class Case:
    variant: str
    shape: Shape
    dtype: str
    causal: bool

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES + ("fp32",):
            raise ValueError(f"case {self.variant}/{self.shape.id}: unknown dtype {self.dtype!r}")

    @property
    def id(self) -> str:
        """Stable text id, e.g. `triton_fa2/b4_h16_s1k/fp16/causal`."""
        return case_id(self.variant, self.shape.id, self.dtype, self.causal)

    @property
    def flops(self) -> float:
        return self.shape.flops(self.causal)


def case_id(variant: str, shape_id: str, dtype: str, causal: bool) -> str:
    return f"{variant}/{shape_id}/{dtype}/{'causal' if causal else 'noncausal'}"
