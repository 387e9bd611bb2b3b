"""The SQL page's data: user queries through history.sql.query (read-only, external access off,
configuration locked, memory, spill, threads, time, rows and bytes limited, in a child process:
the same path as `attnwatch sql`), the schema for the browser, the example queries
(sql_examples.toml), and the downloads (CSV from the table shown, Parquet from DuckDB's own
Arrow result, so nested columns such as `gap_to_backends` keep their type)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from attnwatch.app.data.store import HistoryUnavailable, Source, cached_query
from attnwatch.history.sql import query as history_sql
from attnwatch.history.errors import HistoryError, QueryError
from attnwatch.history.sql.query import UserResult
from attnwatch.history.sql.guard import public_text
from attnwatch.toml_reader import read_toml

EXAMPLES_FILE = Path(__file__).resolve().parent / "sql_examples.toml"
MAX_ROWS = 10_000
MAX_BYTES = 16 * 2**20  # what one result may hold: it is sent to the browser, and kept per session
TIMEOUT_S = 10.0
MAX_SQL_CHARS = 20_000  # the editor's limit, and so the longest query a link may carry
LOCK_WAIT_S: float | None = None  # a file history's lock; None: history.store.db's read deadline


@dataclass(frozen=True)
class Example:
    title: str
    reason: str
    sql: str


def examples(path: Path = EXAMPLES_FILE) -> list[Example]:
    data = read_toml(path, "SQL examples", ValueError)
    return [Example(e["title"], e["reason"], e["sql"].strip()) for e in data["example"]]


def run_query(source: Source, sql: str) -> UserResult:
    """A user's query, limited to MAX_ROWS rows, MAX_BYTES bytes and TIMEOUT_S seconds.

    Raises QueryError, one line without a server path, for anything that goes wrong (a refused
    statement, a file DuckDB cannot open, a lock held too long, a fault of the query's process),
    so the page has one kind of failure to show. The result's frame says in `attrs` whether it
    was cut and by which limit (history.sql.query.run_user_sql).
    """
    try:
        return history_sql.run_user_query(
            source.location, sql, max_rows=MAX_ROWS, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES, lock_wait_s=LOCK_WAIT_S
        )
    except QueryError:
        raise
    except (HistoryError, duckdb.Error, OSError) as exc:
        raise QueryError(public_text(str(exc) or type(exc).__name__, source.path)) from None


@cached_query
def schema(source: Source) -> pd.DataFrame:
    """Tables and views with their columns (object, kind, column, type, position)."""
    try:
        return history_sql.schema_overview(source.location)
    except (HistoryError, duckdb.Error) as exc:
        raise HistoryUnavailable(f"schema of the history: {public_text(str(exc), source.path)}") from None


def to_parquet(result: UserResult) -> bytes:
    """The result as Parquet bytes, from its Arrow table; QueryError for a type Parquet cannot hold (INTERVAL)."""
    return history_sql.to_parquet(result.table)


def to_csv(result: UserResult) -> bytes:
    return result.frame.to_csv(index=False).encode("utf-8")


def limit_note(frame: pd.DataFrame) -> str:
    """Which limit cut the result, for the caption; empty when nothing was cut."""
    cut = frame.attrs.get("cut")
    if cut == "bytes":
        return f", cut at the {MAX_BYTES // 2**20} MiB limit"
    if cut == "rows" or frame.attrs.get("truncated"):
        return f", cut at the {MAX_ROWS:,}-row limit"
    return ""


def renamed_note(result: UserResult) -> str:
    """Duplicate column names the result repeated and what they are shown as; empty if none."""
    if not result.renamed:
        return ""
    pairs = ", ".join(f"{new} (a second {old})" for new, old in result.renamed.items())
    return f"The query repeats column names; shown as {pairs}."
