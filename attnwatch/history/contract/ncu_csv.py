"""The shape of the CSV Nsight Compute prints with `--csv`: what is a whole table, and what is not.

One reading of the table's structure, shared by the metric parser (ci/ncu/parse.py, which reads
the values) and the bundle reader (history/contract/validate.py, which checks a bundle's `ncu_raw.csv`),
so a CSV the parser refuses is refused at ingest too, with the same file and line. It lives
here because history/ may not import ci/ (docs/design.md "Layers and the direction of imports").

What real ncu output holds (H200 recordings in tests/data/ncu): `==PROF==`, `==WARNING==` and
`==ERROR==` lines before, between and after the CSV (notes, never data); a header row starting
with "ID"; on `--page raw` a units row right after it (empty "ID"); one row per kernel launch
(raw) or per kernel, section and metric (`--page details`). ncu ends every line with a newline.

Refused, as NcuCsvError (a BundleError: file, place, message):
  - no header row starting with "ID" (ncu's own ==ERROR== line quoted when it printed one);
  - text that does not end with a newline, or a header with no data rows after it: truncated;
  - a missing column the reader needs (ID, Kernel Name; Block Size and Grid Size on the raw
    page; Section Name ... Metric Value on the details page);
  - a raw-page row whose width is not the header's, a details row too short for its metric
    value, a launch ID that is not an integer.
A value of a listed metric that is not a number is refused by the parser alone: which columns
are metrics is ci/ncu/metrics.toml's to say. The harness keeps in a bundle only CSV the parser
read (ci/ncu/profile.py), so a bundle it writes never holds such a value.

A bundle's ncu_raw.csv is every `ncu --import` output of its ncu pass joined: one or more such
tables, each checked (`check_bundle_csv`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from attnwatch.history.errors import BundleError

HEADER_START = '"ID"'
RAW_COLUMNS = ("ID", "Kernel Name", "Block Size", "Grid Size")
DETAILS_COLUMNS = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")


class NcuCsvError(BundleError, ValueError):
    """The CSV is not what ncu prints; names the file and the line or field."""

    @property
    def where(self) -> str:
        return self.field


@dataclass
class CsvTable:
    """One ncu table: its header, the raw page's units row, and its data rows with their lines."""

    page: str  # "raw" or "details"
    header: list[str]
    rows: list[list[str]]
    lines: list[int]  # the file line each row ends on
    units: list[str] = field(default_factory=list)

    def column(self, name: str) -> int:
        return self.header.index(name)

    def place(self, index: int) -> str:
        """Where data row `index` is, as errors say it."""
        return f"line {self.lines[index]}, data row {index + 1}"


def read_table(path: str | Path, text: str) -> tuple[list[str], CsvTable]:
    """The notes and the one table of one ncu output (from its first header to the end)."""
    notes, tables = _read(str(path), text, split=False)
    return notes, tables[0]


def check_bundle_csv(path: str | Path, text: str) -> list[CsvTable]:
    """A bundle's ncu_raw.csv: one or more ncu tables, each whole (module docstring)."""
    return _read(str(path), text, split=True)[1]


def _numbered(text: str):
    """(line number, line, is a note) for every non-blank line."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped:
            yield number, line, stripped.startswith("==") and "==" in stripped[2:]


def _read(path: str, text: str, split: bool) -> tuple[list[str], list[CsvTable]]:
    notes = [line.strip() for _, line, is_note in _numbered(text) if is_note]
    data = [(number, line) for number, line, is_note in _numbered(text) if not is_note]
    starts = [i for i, (_, line) in enumerate(data) if line.startswith(HEADER_START)]
    if not starts:
        errors = [n for n in notes if n.startswith("==ERROR==")]
        detail = f" (ncu said: {errors[0]})" if errors else ""
        raise NcuCsvError(path, "header", f'no CSV header row starting with "ID"{detail}')
    if not text.endswith("\n"):
        raise NcuCsvError(path, f"line {len(text.splitlines())}", "the file ends mid-line: it is truncated")
    bounds = list(zip(starts, starts[1:] + [len(data)])) if split else [(starts[0], len(data))]
    return notes, [_table(path, data[start:end]) for start, end in bounds]


def _table(path: str, data: list[tuple[int, str]]) -> CsvTable:
    reader = csv.reader(line for _, line in data)
    rows, lines = [], []
    for row in reader:
        rows.append(row)
        lines.append(data[reader.line_num - 1][0])
    header, header_line = rows[0], lines[0]
    page = "details" if "Section Name" in header and "Metric Name" in header else "raw"
    table = CsvTable(page, header, rows[1:], lines[1:])
    if page == "raw" and table.rows and table.rows[0] and table.rows[0][0] == "":
        table.units, table.rows, table.lines = table.rows[0], table.rows[1:], table.lines[1:]
    for name in RAW_COLUMNS if page == "raw" else DETAILS_COLUMNS:
        if name not in header:
            raise NcuCsvError(path, f"line {header_line}, header", f"missing column {name!r}")
    if not table.rows:
        raise NcuCsvError(
            path, f"line {header_line}, data rows", "a header but no kernel rows after it: the file is truncated"
        )
    id_col, value_col = table.column("ID"), table.column("Metric Value") if page == "details" else None
    for index, row in enumerate(table.rows):
        if page == "raw" and len(row) != len(header):
            raise NcuCsvError(path, table.place(index), f"{len(row)} columns, header has {len(header)}")
        if page == "details" and value_col is not None and len(row) <= value_col:
            raise NcuCsvError(path, table.place(index), f"{len(row)} columns, expected at least {value_col + 1}")
        try:
            int(row[id_col])
        except ValueError:
            raise NcuCsvError(
                path, f"{table.place(index)}, column ID", f"not an integer: {row[id_col][:40]!r}"
            ) from None
    return table
