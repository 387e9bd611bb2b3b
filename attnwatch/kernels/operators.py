"""Operators: what a family of kernels computes, declared once (issue 29).

An `Operator` names its problem's shape type, the modes a case runs in (the fourth part of a
case id), its FLOP and byte models, how to make inputs, its float64 ground truth, the baseline
variant every `gap_to_baseline` is taken against, the references a kernel team compares with
(`gap_to_fastest_reference`), and whether its roofline is compute- or memory-bound. Variants
name their operator (`Variant.operator`); the plan runs a variant only on shapes of its
operator's `shape_type`, and the registry checks that each operator's baseline is a registered
variant of it.

Attention is registered here, and RMSNorm (its model in kernels/rmsnorm/model.py) at the bottom;
another operator registers itself with `register_operator` from the module that defines it (its
variants name it), before the registry loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .shapes import Shape

BOUNDS = ("compute", "memory")
# Bytes per element of a case dtype: what the byte models multiply by.
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


@dataclass(frozen=True)
class Operator:
    name: str  # "attention", "rmsnorm"
    modes: tuple[str, ...]  # the 4th part of a case id: ("causal", "noncausal"); rmsnorm: ("fwd",)
    baseline: str  # the variant every gap_to_baseline is taken against
    references: tuple[str, ...]  # variants a kernel team compares with: gap_to_fastest_reference
    bound: str  # "compute" | "memory": what the roofline plots against
    flops: Callable[[Any, str], float]  # (shape, mode) -> FLOPs of one call
    bytes: Callable[[Any, str, str], float]  # (shape, dtype, mode) -> minimum DRAM bytes of one call
    make_inputs: Callable[[Any, str, str, Any, int], tuple]  # (shape, dtype, mode, device, seed) -> tensors
    reference64: Callable[[tuple, str], Any]  # (inputs, mode) -> float64 output (ground truth)
    shape_type: type  # the shape dataclass (attention: Shape)
    # The per-dtype correctness tolerances of its cases (kernels.correctness's format); None:
    # attention's, kernels/tolerances.toml.
    tolerances: Path | None = None

    def __post_init__(self) -> None:
        if self.bound not in BOUNDS:
            raise ValueError(f"operator {self.name!r}: bound {self.bound!r} is not one of {BOUNDS}")
        if not self.modes:
            raise ValueError(f"operator {self.name!r}: needs at least one mode")
        if any("/" in m or not m for m in self.modes):
            raise ValueError(f"operator {self.name!r}: a mode is one non-empty part of a case id (no '/')")


_OPERATORS: dict[str, Operator] = {}


def register_operator(op: Operator) -> Operator:
    """Add an operator; a second one of the same name is a programming error."""
    if op.name in _OPERATORS:
        raise ValueError(f"operator {op.name!r} registered twice")
    _OPERATORS[op.name] = op
    return op


def get_operator(name: str) -> Operator:
    try:
        return _OPERATORS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(sorted(_OPERATORS))}") from None


def all_operators() -> list[Operator]:
    return list(_OPERATORS.values())


def operator_of_shape(shape: Any) -> Operator | None:
    """The first registered operator whose shape type `shape` is (None: no operator's)."""
    return next((op for op in _OPERATORS.values() if isinstance(shape, op.shape_type)), None)


# --- attention ---------------------------------------------------------------------------------


def _attention_flops(shape: Shape, mode: str) -> float:
    return shape.flops(mode == "causal")


def _attention_bytes(shape: Shape, dtype: str, mode: str) -> float:
    """Q, K, V read once and O written once (kernels.shapes.Shape.min_bytes): a fused forward's
    floor; the causal mask skips work, never a tensor, so the mode does not change it."""
    return float(shape.min_bytes(ELEMENT_BYTES[dtype]))


def _attention_inputs(shape: Shape, dtype: str, mode: str, device: Any, seed: int) -> tuple:
    from .inputs import make_qkv

    return make_qkv(shape, dtype, device, seed)


def _attention_reference(inputs: tuple, mode: str) -> Any:
    from .reference import reference_attention

    q, k, v = inputs
    return reference_attention(q, k, v, mode == "causal")


ATTENTION = register_operator(
    Operator(
        name="attention",
        modes=("causal", "noncausal"),
        baseline="sdpa",
        # The SDPA backends a kernel team compares with, and FlashAttention-4 where one is registered
        # (a name without a registered variant is never measured and so never the fastest).
        references=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "fa4_sm90"),
        bound="compute",
        flops=_attention_flops,
        bytes=_attention_bytes,
        make_inputs=_attention_inputs,
        reference64=_attention_reference,
        shape_type=Shape,
    )
)


# --- rmsnorm (kernels/rmsnorm/model.py): registered here, before its variants name it ----------

from .rmsnorm.model import make_operator as _make_rmsnorm  # noqa: E402  (after Operator exists)

RMSNORM = register_operator(_make_rmsnorm(Operator))
