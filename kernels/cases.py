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


def parse_case_id(text: str) -> tuple[str, str, str, bool]:
    """Inverse of `case_id` (`attnwatch bisect --case`); raises ValueError naming the bad part."""
    parts = text.split("/")
    if len(parts) != 4 or parts[3] not in ("causal", "noncausal"):
        raise ValueError(f"not a case id (variant/shape/dtype/causal|noncausal): {text!r}")
    return parts[0], parts[1], parts[2], parts[3] == "causal"
