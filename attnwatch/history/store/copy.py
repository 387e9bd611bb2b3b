"""Copy a history into another (a file into a lake, a lake into a file) and prove nothing was lost.

`copy_history(SRC, DST)` exports SRC to Parquet and imports it into DST (history.store.exchange:
validated, one transaction, idempotent, merging into a DST that has rows already), then checks
every table: each SRC row must be in DST as often as in SRC. A row is compared by its content
hash: DuckDB's `hash()` of the row's columns by name, leaving out ids that are local to one
database (alert_id, event_id), with a reference to an alert replaced by that alert's dedup_key.
The report gives per table the row count and a checksum (the hashes' sum mod 2^64, which does
not depend on row order) on each side; when DST was empty the two must be equal, otherwise DST
may hold more. Any SRC row missing from DST raises CopyVerificationError naming the table.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnwatch.history.store.db import open_read
from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.history.store.exchange import (
    ID_REFERENCES,
    NATURAL_KEYS,
    SURROGATE_KEYS,
    base_tables,
    export_history,
    import_history,
    table_columns,
)
from attnwatch.history.store.location import HistoryLocation

BOOKKEEPING = ("schema_migrations",)


class CopyVerificationError(HistoryError):
    """After the copy, a source row is not in the destination."""


@dataclass(frozen=True)
class TableCheck:
    table: str
    source_rows: int
    destination_rows: int
    source_checksum: int
    destination_checksum: int
    inserted: int
    missing: int  # source rows absent from the destination (0 after a good copy)


@dataclass
class CopyReport:
    source: str
    destination: str
    tables: list[TableCheck] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"{'table':18s} {'source rows':>12s} {'dest rows':>12s} {'inserted':>10s}  checksum (source / destination)"
        ]
        for t in self.tables:
            same = "equal" if t.source_checksum == t.destination_checksum else "destination holds more"
            out.append(
                f"{t.table:18s} {t.source_rows:>12d} {t.destination_rows:>12d} {t.inserted:>10d}  "
                f"{t.source_checksum:016x} / {t.destination_checksum:016x} ({same})"
            )
        out.append(f"copied {self.source} -> {self.destination}: every source row is in the destination")
        return out


def copy_history(src: HistoryLocation, dst: HistoryLocation, repo: str | None = None) -> CopyReport:
    """Copy SOURCE into DESTINATION and verify it (module docstring); `repo`: the repository
    setting, which the copied runs must match (history.contract.repository)."""
    if src.label == dst.label:
        raise HistoryError(f"{src.label}: source and destination are the same history")
    with tempfile.TemporaryDirectory(prefix="attnwatch-copy-") as tmp:
        export_history(src, Path(tmp) / "export")
        try:
            imported = import_history(dst, Path(tmp) / "export", repo)
        except BundleError as exc:  # the export is a temporary directory: name the source history instead
            raise BundleError(src.label, exc.field, exc.message) from None
    before = table_hashes(src)
    after = table_hashes(dst)
    report = CopyReport(src.label, dst.label)
    for table, hashes in before.items():
        theirs = after.get(table, np.zeros(0, dtype=np.uint64))
        check = TableCheck(
            table,
            len(hashes),
            len(theirs),
            checksum(hashes),
            checksum(theirs),
            imported.rows.get(table, 0),
            missing_count(hashes, theirs),
        )
        report.tables.append(check)
        if check.missing:
            raise CopyVerificationError(
                f"{dst.label}: table {table}: {check.missing} of {check.source_rows} rows of {src.label} "
                "are not in the destination after the copy"
            )
    return report


def table_hashes(location: HistoryLocation) -> dict[str, np.ndarray]:
    """table -> the content hash of each row (module docstring), as uint64."""
    out = {}
    with open_read(location) as con:
        for table in base_tables(con):
            if table in BOOKKEEPING:
                continue
            hashes = con.execute(f'SELECT {_content_hash(con, table)} AS h FROM "{table}" e').fetchnumpy()["h"]
            out[table] = np.asarray(hashes, dtype=np.uint64)
    return out


def _content_hash(con, table: str) -> str:
    fields = []
    for column in sorted(table_columns(con, table)):
        if column == SURROGATE_KEYS.get(table):
            continue
        parent = ID_REFERENCES.get(table, {}).get(column)
        if parent:
            natural = ", ".join(f'p."{c}"' for c in NATURAL_KEYS[parent])
            value = f'(SELECT {natural} FROM "{parent}" p WHERE p."{SURROGATE_KEYS[parent]}" = e."{column}")'
        else:
            value = f'e."{column}"'
        fields.append(f'"{column}" := {value}')
    return f"hash(struct_pack({', '.join(fields)}))"


def checksum(hashes: np.ndarray) -> int:
    """Order-independent: the sum of the row hashes mod 2^64."""
    return int(hashes.sum(dtype=np.uint64)) if len(hashes) else 0


def missing_count(source: np.ndarray, destination: np.ndarray) -> int:
    """How many source rows (as a multiset of hashes) the destination lacks."""
    values, counts = np.unique(source, return_counts=True)
    theirs, their_counts = np.unique(destination, return_counts=True)
    at = np.searchsorted(theirs, values)
    found = np.zeros_like(counts)
    inside = at < len(theirs)
    hit = inside.copy()
    hit[inside] = theirs[at[inside]] == values[inside]
    found[hit] = their_counts[at[hit]]
    return int(np.maximum(counts - found, 0).sum())
