"""The explicit registry of attention forward variants.

The built-in variants are the `VARIANTS` of the modules listed in `kernels.variants`
(explicit list, no discovery), registered on first use. Other modules (a test's fault
variants, loaded through `RunOptions.extra_variant_modules`) call `register` themselves.
The records themselves live in `kernels.variant` and `kernels.build_report` and are
re-exported here, the one import a variant author needs.

Availability is decided once per process (`kernels.availability`) and every skip records
its reason. Exactly one variant carries `is_reference`: every gap is taken against it
(`reference`), and it is measured first in each interleave group.
"""

from __future__ import annotations

from .build_report import BuildReport
from .variant import FAMILIES, Prepared, Variant

__all__ = ["BuildReport", "FAMILIES", "Prepared", "Variant", "all_variants", "get", "reference", "register"]

_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant; a second variant of the same name, or a second reference, is a programming error."""
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name!r} registered twice")
    held = next((v.name for v in _REGISTRY.values() if v.is_reference), None)
    if variant.is_reference and held is not None:
        raise ValueError(f"variant {variant.name!r} is marked is_reference, but {held!r} is the reference already: "
                         "exactly one variant may be")
    _REGISTRY[variant.name] = variant
    return variant


def get(name: str) -> Variant:
    _load_builtin_variants()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def reference() -> Variant:
    """The variant every gap is taken against: the one registered with `is_reference`."""
    _load_builtin_variants()
    marked = [v for v in _REGISTRY.values() if v.is_reference]
    if len(marked) != 1:
        raise ValueError(f"{len(marked)} registered variants are marked is_reference: exactly one must be")
    return marked[0]


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
