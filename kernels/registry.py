"""The explicit registry of attention forward variants.

Each variant declares what it needs ("cuda", "hopper", "triton", "nvcc", "cupy"), which
combinations it does not support (with the reason), and a `prepare` function that does all
setup and compilation and returns a zero-argument callable, so that nothing but the kernel
launch sits in the timed region (the tritonbench operator style, DESIGN.md).

Availability is decided once per process (`availability`) and every skip records its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kernels.cases import Case

FAMILIES = ("sdpa", "torch", "cuda", "triton", "cutlass", "test")


@dataclass
class BuildReport:
    """What the real compiler said about one variant's build (ptxas -v or kernel attributes)."""

    variant: str
    ok: bool
    target: str = ""  # e.g. "sm_90", "sm_90a", "triton", "n/a"
    compile_seconds: float | None = None
    registers_per_thread: int | None = None
    shared_mem_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_frame_bytes: int | None = None
    source_hash: str | None = None
    cached: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # e.g. the Triton autotune choice
    log_tail: str = ""
    error: str | None = None


@dataclass
class Prepared:
    """A case ready to run: `fn()` launches the kernel once and returns the output tensor.

    `out` is the caller-visible output buffer when the variant writes into one it was given
    (custom kernels); the correctness suite fills it with NaN before each call so that
    unwritten elements fail. Library variants that allocate their own output leave it None.
    """

    fn: Callable[[], Any]
    q: Any
    k: Any
    v: Any
    out: Any | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Variant:
    name: str
    family: str
    description: str
    prepare: Callable[[Case, Any, int], Prepared]  # (case, torch.device, seed) -> Prepared
    is_reference: bool = False
    needs: frozenset[str] = frozenset()
    unsupported: Callable[[Case], str | None] = lambda case: None
    build: Callable[[], BuildReport] | None = None
    lineage: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"variant {self.name!r}: unknown family {self.family!r}")


_REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add a variant; a second variant of the same name is a programming error."""
    if variant.name in _REGISTRY:
        raise ValueError(f"variant {variant.name!r} registered twice")
    _REGISTRY[variant.name] = variant
    return variant


def get(name: str) -> Variant:
    _load_builtin_variants()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown variant {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def all_variants() -> list[Variant]:
    _load_builtin_variants()
    return list(_REGISTRY.values())


_loaded = False


def _load_builtin_variants() -> None:
    """Import the modules that register the built-in variants (explicit list, no discovery)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    from kernels import variants  # noqa: F401  (registers on import)
