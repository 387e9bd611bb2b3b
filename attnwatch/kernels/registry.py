"""The explicit registry of kernel variants, of every operator (kernels.operators).

The built-in variants are the `VARIANTS` of the modules listed in `kernels.variants`
(explicit list, no discovery), registered on first use. Other modules (a test's fault
variants, loaded through `RunOptions.extra_variant_modules`) call `register` themselves.
The records themselves live in `kernels.variant` and `kernels.build_report` and are
re-exported here, the one import a variant author needs.

Availability is decided once per process (`kernels.availability`) and every skip records
its reason. Each operator names its baseline (kernels.operators.Operator.baseline): every
gap_to_baseline of its cases is taken against that variant, measured first in each interleave
group; `baseline(operator)` returns it and refuses, in one line, a baseline that is not a
registered variant of that operator. `reference()` is attention's baseline.
"""

from __future__ import annotations

from .build_report import BuildReport
from .operators import get_operator
from .variant import FAMILIES, Prepared, Variant

__all__ = ["BuildReport", "FAMILIES", "Prepared", "Variant", "all_variants", "baseline", "get", "reference", "register"]

_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant; a second variant of the same name, or one of an unknown operator, is a programming error."""
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name!r} registered twice")
    try:
        get_operator(variant.operator)
    except KeyError as exc:
        raise ValueError(f"variant {variant.name!r}: {exc.args[0]}") from None
    _REGISTRY[variant.name] = variant
    return variant


def get(name: str) -> Variant:
    _load_builtin_variants()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def baseline(operator: str = "attention") -> Variant:
    """The variant every gap_to_baseline of `operator`'s cases is taken against (its Operator's
    `baseline`); ValueError when that is not a registered variant of the operator."""
    _load_builtin_variants()
    name = get_operator(operator).baseline
    variant = _REGISTRY.get(name)
    if variant is None or variant.operator != operator:
        raise ValueError(f"operator {operator!r}: its baseline {name!r} is not a registered {operator} variant")
    return variant


def reference() -> Variant:
    """Attention's baseline (`sdpa`): what attention-only callers call the reference."""
    return baseline("attention")


def all_variants() -> list[Variant]:
    _load_builtin_variants()
    return list(_REGISTRY.values())


_loaded = False


def _load_builtin_variants() -> None:
    """Register the built-in variants once (the modules listed in `kernels.variants`)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from .variants import BUILTIN

    for variant in BUILTIN:
        register(variant)
