"""Named shapes, of every operator, and the sets that CI runs.

`SHAPES` holds each named shape by id, whatever its type (attention's `Shape` here; another
operator adds its own with `register_shapes`); a set of `SHAPE_SETS` may hold shapes of several
operators, and the plan runs a variant only on the shapes of its operator's shape type
(kernels.operators.Operator.shape_type).

The ids and sizes come from the kernel team's reports (docs/design.md, "Shapes"); the `nightly`
set adds the FlashAttention-paper grid (B*S = 16k tokens, hidden 2048, D in {64, 128},
S from 512 to 16k).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """One attention problem size: batch, heads, sequence length (Sq = Sk) and head dim."""

    id: str
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("batch", "heads", "seq_len", "head_dim"):
            value = getattr(self, field)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"shape {self.id!r}: {field} must be a positive int, got {value!r}")

    @property
    def seq_q(self) -> int:
        return self.seq_len

    @property
    def seq_k(self) -> int:
        return self.seq_len

    def flops(self, causal: bool) -> float:
        """Forward FLOPs: 4*B*H*Sq*Sk*D (two matmuls), halved when causal (Sq = Sk)."""
        total = 4.0 * self.batch * self.heads * self.seq_q * self.seq_k * self.head_dim
        return total / 2.0 if causal else total

    def min_bytes(self, element_size: int) -> int:
        """Fewest bytes a fused forward must move: read Q, K, V once and write O once."""
        return 4 * self.batch * self.heads * self.seq_len * self.head_dim * element_size


def adhoc_shape(batch: int, heads: int, seq_len: int, head_dim: int) -> Shape:
    """A shape outside the named table (odd lengths in tests), with a stable generated id."""
    return Shape(f"b{batch}_h{heads}_s{seq_len}_d{head_dim}", batch, heads, seq_len, head_dim, "ad hoc")


SHAPES: dict[str, Shape] = {
    s.id: s
    for s in (
        Shape("l4_mission", 1, 8, 512, 64, "seed 001"),
        Shape("h100_small", 1, 16, 1024, 64, "seed 002"),
        Shape("b4_h16_s1k", 4, 16, 1024, 64, "seed 000"),
        Shape("b4_h16_s1k_d128", 4, 16, 1024, 128, "seed 000"),
        Shape("b4_h16_s2k", 4, 16, 2048, 64, "seed 000"),
        Shape("b16_h16_s2k", 16, 16, 2048, 64, "seed 004"),
    )
}

# FlashAttention-2 paper grid: 16k tokens per batch, hidden 2048 => H = 2048 / D.
for _d in (64, 128):
    for _s in (512, 1024, 2048, 4096, 8192, 16384):
        _shape = Shape(f"fa_s{_s}_d{_d}", 16384 // _s, 2048 // _d, _s, _d, "FlashAttention paper grid")
        SHAPES[_shape.id] = _shape

# Shapes that run anywhere, including on a CPU under the Triton interpreter.
SHAPES["cpu_tiny"] = Shape("cpu_tiny", 1, 2, 128, 64, "small enough for a CPU")

SHAPE_SETS: dict[str, tuple[str, ...]] = {
    "pr": ("h100_small", "b4_h16_s1k"),
    "main": ("l4_mission", "h100_small", "b4_h16_s1k", "b4_h16_s1k_d128", "b4_h16_s2k", "b16_h16_s2k"),
    "nightly": (
        "l4_mission",
        "h100_small",
        "b4_h16_s1k",
        "b4_h16_s1k_d128",
        "b4_h16_s2k",
        "b16_h16_s2k",
        *(f"fa_s{s}_d{d}" for d in (64, 128) for s in (512, 1024, 2048, 4096, 8192, 16384)),
    ),
    "cpu": ("cpu_tiny",),
}


def register_shapes(shapes: list, sets: dict[str, tuple[str, ...]]) -> None:
    """Add another operator's named shapes, and their ids to the named sets (a new name makes a
    set); an id already taken is a programming error."""
    for shape in shapes:
        if shape.id in SHAPES:
            raise ValueError(f"shape {shape.id!r} registered twice")
        SHAPES[shape.id] = shape
    for name, ids in sets.items():
        unknown = [i for i in ids if i not in SHAPES]
        if unknown:
            raise ValueError(f"shape set {name!r}: unknown shape id(s) {', '.join(unknown)}")
        SHAPE_SETS[name] = tuple(dict.fromkeys(SHAPE_SETS.get(name, ()) + tuple(ids)))


def shape_set(name: str, shape_type: type | None = None) -> list:
    """The shapes of a named set, of every operator, or only those of `shape_type` (attention's
    `Shape`: what a script or test about attention kernels wants); a clear error for an unknown name."""
    try:
        ids = SHAPE_SETS[name]
    except KeyError:
        raise KeyError(f"unknown shape set {name!r}; known: {', '.join(SHAPE_SETS)}") from None
    return [SHAPES[i] for i in ids if shape_type is None or isinstance(SHAPES[i], shape_type)]


# RMSNorm's shapes and sets (kernels/rmsnorm/shapes.py, which does not import this module), here so
# that every named set is whole as soon as this module is imported (select_shapes runs before the
# registry loads).
from .rmsnorm import shapes as _rmsnorm_shapes  # noqa: E402

register_shapes(list(_rmsnorm_shapes.SHAPES.values()), _rmsnorm_shapes.SHAPE_SETS)
