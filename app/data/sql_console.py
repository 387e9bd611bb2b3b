"""The SQL page's data: user queries through history.sql (read-only, external access off,
configuration locked, memory, spill, threads, time, rows and bytes limited, in a child process:
the same path as `attnwatch sql`), the schema for the browser, and the example queries
(sql_examples.toml)."""

from __future__ import annotations

import io
import tomllib
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from app.data.store import HistoryUnavailable, Source, cached_query
from history import sql as history_sql
from history.errors import HistoryError, QueryError

EXAMPLES_FILE = Path(__file__).resolve().parent / "sql_examples.toml"
MAX_ROWS = 10_000
MAX_BYTES = 16 * 2**20  # what one result may hold: it is sent to the browser, and kept per session
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Example:
    title: str
    reason: str
    sql: str


def examples(path: Path = EXAMPLES_FILE) -> list[Example]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [Example(e["title"], e["reason"], e["sql"].strip()) for e in data["example"]]


def run_query(source: Source, sql: str) -> pd.DataFrame:
    """A user's query, limited to MAX_ROWS rows, MAX_BYTES bytes and TIMEOUT_S seconds.

    Raises QueryError for anything that goes wrong, including a file DuckDB cannot open, so
    the page has one kind of failure to show. `frame.attrs["truncated"]` says if the result was
    cut, `frame.attrs["cut"]` by which limit ('rows' or 'bytes').
    """
    try:
        return history_sql.run_user_sql(source.path, sql, max_rows=MAX_ROWS, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES)
    except QueryError:
        raise
    except (HistoryError, duckdb.Error) as exc:
        raise QueryError(f"{source.path}: {exc}") from None


@cached_query
def schema(source: Source) -> pd.DataFrame:
    """Tables and views with their columns (object, kind, column, type, position)."""
    try:
        return history_sql.schema_overview(source.path)
    except (HistoryError, duckdb.Error) as exc:
        raise HistoryUnavailable(f"schema of {source.path}: {exc}") from None


def to_parquet(frame: pd.DataFrame) -> bytes:
    """The frame as Parquet bytes; raises QueryError for a column type Parquet cannot hold (INTERVAL)."""
    buffer = io.BytesIO()
    try:
        frame.to_parquet(buffer, index=False)
    except (ValueError, TypeError, OverflowError, NotImplementedError) as exc:  # what pyarrow raises
        raise QueryError(f"no Parquet for this result: {str(exc).splitlines()[0]} (cast that column to VARCHAR)") from None
    return buffer.getvalue()


def limit_note(frame: pd.DataFrame) -> str:
    """Which limit cut the result, for the caption; empty when nothing was cut."""
    cut = frame.attrs.get("cut")
    if cut == "bytes":
        return f", cut at the {MAX_BYTES // 2**20} MiB limit"
    if cut == "rows" or frame.attrs.get("truncated"):
        return f", cut at the {MAX_ROWS:,}-row limit"
    return ""
