"""A user query's result, fetched in small Arrow batches up to a row and a byte cap.

The result is read through DuckDB's streaming Arrow reader (`to_arrow_reader`, a
`fetch_record_batch` in DuckDB 1.x) BATCH_ROWS rows at a time and kept only up to
`max_rows` rows and `max_bytes` bytes (Arrow buffer sizes); the batch that crosses a cap is cut
to the rows that fit and copied, so the rest of it is freed. What the process holds for a
result is therefore bounded by the caps plus one batch, plus what DuckDB has in flight
(about two vectors of 2,048 rows with history.sql.sandbox's streaming buffer): with 200 KB
rows that is about 0.9 GB, where fetching the whole result first took 3.7 GB and more.
One batch is BATCH_ROWS times the widest row: 32 keeps a batch of 10 MB values at 320 MB and
costs about 0.3 s more per 100,000 narrow rows than DuckDB's 2,048 (measured, DuckDB 1.5.5).

A result whose first row alone is over `max_bytes` is refused: there is nothing to show.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from attnwatch.history.errors import QueryError

BATCH_ROWS = 32
CHUNK_BYTES = 8 * 2**20  # kept batches are merged into chunks of about this size as they arrive


@dataclass(frozen=True)
class Capped:
    """The rows kept, which cap cut the result (None, 'rows' or 'bytes'), and the bytes counted."""

    table: pa.Table
    cut: str | None
    nbytes: int = 0


def fetch_capped(relation, max_rows: int, max_bytes: int) -> Capped:
    """Stream `relation` (a DuckDB relation, or None for a statement without a result).

    The byte cap counts the result's own Arrow buffers (values, offsets, validity bits, as
    DuckDB exports them: `get_total_buffer_size`, which is also 25 times quicker than `nbytes`
    on 57 columns), so a result of `max_bytes` bytes is kept whole and one byte less is cut. Kept
    batches are merged into chunks of about CHUNK_BYTES as they arrive: 32-row batches carry a
    framing of their own per batch and column in an Arrow IPC file, which made the answer file
    of 80,000 rows of 57 BIGINT columns 18% larger than its data (43.6 MB for 37.1 MB; merged,
    36.5 MB) and past the cap the parent checks it against.
    """
    if relation is None:
        return Capped(pa.table({}), None)
    # DuckDB 1.4+ names it to_arrow_reader; older 1.x fetch_record_batch (the same reader).
    open_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    reader = open_reader(BATCH_ROWS)
    chunks, pending, pending_size, rows, size, cut = [], [], 0, 0, 0, None
    for batch in reader:
        keep = min(batch.num_rows, max_rows - rows)
        if keep < batch.num_rows:
            cut = "rows"
        if keep < batch.num_rows or size + batch.get_total_buffer_size() > max_bytes:
            batch, keep_cut = _head_within(batch, keep, max_bytes - size)
            cut = keep_cut or cut
        pending.append(batch)
        pending_size += batch.get_total_buffer_size()
        rows += batch.num_rows
        size += batch.get_total_buffer_size()
        if pending_size >= CHUNK_BYTES:
            chunks.append(_merged(pending, reader.schema))
            pending, pending_size = [], 0
        if cut:
            break
    if cut == "bytes" and rows == 0:
        raise QueryError(
            f"one row of the result is larger than the {_mib(max_bytes)} a result may hold; "
            "select narrower values (e.g. left(column, 1000))"
        )
    if pending:
        chunks.append(_merged(pending, reader.schema))
    return Capped(pa.Table.from_batches([b for chunk in chunks for b in chunk], schema=reader.schema), cut, size)


def _merged(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """The batches as one record batch; as they are where one would hold more than an Arrow array can."""
    try:
        return pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()
    except pa.ArrowInvalid:  # offsets past 2**31 in one string column
        return batches


def _head_within(batch: pa.RecordBatch, rows: int, budget: int) -> tuple[pa.RecordBatch, str | None]:
    """A copy of the first `rows` rows of `batch`, fewer if they hold more than `budget` bytes (then
    'bytes' is returned as the cut). A copy, so the rest of the batch is freed."""
    keep, cut = rows, None
    if batch.slice(0, keep).nbytes > budget:
        keep, cut = _rows_within(batch.slice(0, keep), budget), "bytes"
    while True:
        head = batch.take(pa.array(range(keep), type=pa.int64()))
        if keep == 0 or head.get_total_buffer_size() <= budget:
            return head, cut
        keep, cut = keep - 1, "bytes"  # the copy's buffers can be a few bytes larger than the slice's


def _rows_within(batch: pa.RecordBatch, budget: int) -> int:
    """How many leading rows of `batch` fit in `budget` bytes (binary search on sliced sizes)."""
    low, high = 0, batch.num_rows
    while low < high:
        mid = (low + high + 1) // 2
        if batch.slice(0, mid).nbytes <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"
