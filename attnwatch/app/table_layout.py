"""Column widths that fit what a table shows, so its headers and cells are not cut.

Streamlit's data grid draws headers and cells in one font (Source Sans, regular, 14 px) with
8 px of padding on either side of a column, and cuts whatever is wider. A column sized from the
longest text it holds (its header and its cells, as shown) is drawn whole. Widths come from the
font's advance widths below, as Chromium reports them for the font the dashboard serves; a
character not listed counts as the widest listed one, so an estimate is never too narrow.
"""

from __future__ import annotations

import math
from typing import Iterable

import pandas as pd

PADDING_PX = 8  # the grid's padding on each side of a cell and a header
SLACK_PX = 4  # room for rounding between this estimate and the browser's own layout
CHECKBOX_PX = 56  # a boolean column: the grid draws a box, not text

# Advance widths (px) of Source Sans at 14 px, as measured in Chromium (CanvasRenderingContext2D
# .measureText with the grid's header and cell font): digits, letters and the signs tables use.
_ADVANCE = {
    **dict.fromkeys("0123456789#$+<=>^~×−≤≥", 6.96),
    " ": 2.8,
    "!": 4.05,
    '"': 5.96,
    "%": 11.54,
    "&": 8.53,
    "'": 3.49,
    "(": 4.24,
    ")": 4.24,
    "*": 5.85,
    ",": 3.49,
    "-": 4.35,
    ".": 3.49,
    "/": 4.9,
    ":": 3.49,
    ";": 3.49,
    "?": 5.95,
    "@": 11.86,
    "[": 4.24,
    "\\": 4.9,
    "]": 4.24,
    "_": 6.96,
    "`": 7.59,
    "{": 4.24,
    "|": 3.37,
    "}": 4.24,
    "µ": 7.87,
    "Δ": 8.23,
    "·": 3.49,
    "—": 11.2,
    "…": 13.27,
    "A": 7.6,
    "B": 8.23,
    "C": 7.99,
    "D": 8.61,
    "E": 7.38,
    "F": 6.92,
    "G": 8.64,
    "H": 9.13,
    "I": 3.68,
    "J": 6.71,
    "K": 8.11,
    "L": 6.8,
    "M": 10.18,
    "N": 9.06,
    "O": 9.3,
    "P": 7.92,
    "Q": 9.3,
    "R": 7.97,
    "S": 7.48,
    "T": 7.5,
    "U": 9.03,
    "V": 7.21,
    "W": 11.0,
    "X": 7.18,
    "Y": 6.66,
    "Z": 7.55,
    "a": 7.06,
    "b": 7.74,
    "c": 6.38,
    "d": 7.77,
    "e": 6.94,
    "f": 4.09,
    "g": 7.06,
    "h": 7.62,
    "i": 3.44,
    "j": 3.46,
    "k": 6.93,
    "l": 3.57,
    "m": 11.61,
    "n": 7.66,
    "o": 7.59,
    "p": 7.77,
    "q": 7.77,
    "r": 4.86,
    "s": 5.87,
    "t": 4.73,
    "u": 7.62,
    "v": 6.54,
    "w": 10.07,
    "x": 6.24,
    "y": 6.54,
    "z": 5.95,
}
_WIDEST = max(_ADVANCE.values())


def text_width(text: str) -> float:
    """The width (px) of `text` in the grid's font."""
    return sum(_ADVANCE.get(ch, _WIDEST) for ch in str(text))


def fit(header: str, values: Iterable = (), *, least: int = 0, most: int = 480) -> int:
    """A column width (px) that shows `header` and every value of `values` (as the cell shows it:
    pass formatted text for numbers) whole, at least `least`, at most `most` (a longer cell is
    then cut; its full text is in the cell's tooltip and the download)."""
    texts = [header] + [str(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    width = max(text_width(t) for t in texts) + 2 * PADDING_PX + SLACK_PX
    return int(min(max(math.ceil(width), least), most))


def number_texts(values: Iterable, decimals: int, signed: bool = False) -> list[str]:
    """Numbers as a NumberColumn with format '%.Nf' (or '%+.Nf') shows them, for `fit`."""
    spec = f"{'+' if signed else ''}.{decimals}f"
    return [
        format(float(v), spec) for v in pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").dropna()
    ]


def decimals_for(values: Iterable, significant: int = 2, least: int = 1, most: int = 6) -> int:
    """Decimals that show the smallest non-zero magnitude of `values` with `significant` digits:
    a CPU run's TFLOPS (0.005) must not read 0.0, a GPU's (312.4) keeps one decimal."""
    numbers = pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce").abs()
    numbers = numbers[numbers > 0]
    if numbers.empty:
        return least
    needed = significant - 1 - math.floor(math.log10(float(numbers.min())))
    return int(min(max(needed, least), most))
