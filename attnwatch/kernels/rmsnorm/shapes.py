"""Named RMSNorm problem sizes (rows x hidden) and the sets that CI runs.

An RMSNorm call normalises each of `rows` rows of length `hidden` (rows = the tokens of a
batch, flattened; hidden = the model width). Sizes are the widths of current open LLMs at
prefill token counts of 4k-32k: the pre-attention and pre-MLP norms of one layer see exactly
these. The `pr` set is two small problems (tens of µs each), `main` adds a 16k-token and an
8k-token x 8192 problem, `nightly` goes to 32k tokens and adds non-power-of-two widths (5120,
7168) that exercise the kernels' masked tails.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowsShape:
    """One row-wise problem: `rows` independent rows of `hidden` elements each."""

    id: str
    rows: int
    hidden: int
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("rows", "hidden"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"shape {self.id!r}: {field} must be a positive int, got {value!r}")

    @property
    def elements(self) -> int:
        return self.rows * self.hidden


def adhoc_rows_shape(rows: int, hidden: int) -> RowsShape:
    """A shape outside the named table (odd widths in tests), with a stable generated id."""
    return RowsShape(f"rms_r{rows}_h{hidden}", rows, hidden, "ad hoc")


SHAPES: dict[str, RowsShape] = {
    s.id: s
    for s in (
        RowsShape("rms_t4k_h2048", 4096, 2048, "Llama-3.2-1B width, a 4k-token prefill"),
        RowsShape("rms_t4k_h4096", 4096, 4096, "Llama-3-8B / Mistral-7B width, a 4k-token prefill"),
        RowsShape("rms_t16k_h4096", 16384, 4096, "Llama-3-8B width, a 16k-token batch"),
        RowsShape("rms_t8k_h8192", 8192, 8192, "Llama-3-70B width, an 8k-token prefill"),
        RowsShape("rms_t32k_h2048", 32768, 2048, "Llama-3.2-1B width, a 32k-token batch"),
        RowsShape("rms_t32k_h4096", 32768, 4096, "Llama-3-8B width, a 32k-token batch"),
        RowsShape("rms_t16k_h5120", 16384, 5120, "Qwen2.5-14B width (not a power of two), a 16k-token batch"),
        RowsShape("rms_t16k_h7168", 16384, 7168, "DeepSeek-V3 width (not a power of two), a 16k-token batch"),
        RowsShape("rms_t32k_h8192", 32768, 8192, "Llama-3-70B width, a 32k-token batch (1 GiB moved in fp16)"),
        RowsShape("rms_cpu_tiny", 8, 200, "small enough for the Triton interpreter; 200 is not a power of two"),
    )
}

SHAPE_SETS: dict[str, tuple[str, ...]] = {
    "pr": ("rms_t4k_h2048", "rms_t4k_h4096"),
    "main": ("rms_t4k_h2048", "rms_t4k_h4096", "rms_t16k_h4096", "rms_t8k_h8192"),
    "nightly": (
        "rms_t4k_h2048",
        "rms_t4k_h4096",
        "rms_t16k_h4096",
        "rms_t8k_h8192",
        "rms_t32k_h2048",
        "rms_t32k_h4096",
        "rms_t16k_h5120",
        "rms_t16k_h7168",
        "rms_t32k_h8192",
    ),
    "cpu": ("rms_cpu_tiny",),
}


def shape_set(name: str) -> list[RowsShape]:
    """The shapes of a named set; a clear error for an unknown name."""
    try:
        ids = SHAPE_SETS[name]
    except KeyError:
        raise KeyError(f"unknown RMSNorm shape set {name!r}; known: {', '.join(SHAPE_SETS)}") from None
    return [SHAPES[i] for i in ids]
