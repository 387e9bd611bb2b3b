"""The launch configuration of `rmsnorm_triton` and its limits, without importing Triton
(the variant's `unsupported` reads them on hosts that have no Triton).

One program per row holds the whole row in registers: BLOCK_N = the next power of two >=
hidden, so hidden <= MAX_HIDDEN. The warp count grows with the row so that each thread holds
16-32 fp32 values at most (the same steps as Liger-Kernel's `calculate_settings`).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HIDDEN = 32768
# Under TRITON_INTERPRET=1 every program runs in numpy on the host: ~1 s per 10^5 elements.
INTERPRETER_MAX_ELEMENTS = 1 << 17
INTERPRETER_REASON = "the Triton interpreter runs each program on the host; larger problems take minutes"


@dataclass(frozen=True)
class RowConfig:
    block_n: int
    num_warps: int

    @property
    def name(self) -> str:
        return f"row_b{self.block_n}_w{self.num_warps}"


def row_config(hidden: int) -> RowConfig:
    """The launch configuration for rows of `hidden` elements (fixed by the row length)."""
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"rmsnorm_triton: hidden {hidden} is outside 1..{MAX_HIDDEN}, the rows one program holds")
    block = 1 << (hidden - 1).bit_length()
    warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return RowConfig(block, warps)
