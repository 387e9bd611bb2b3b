"""Where the dashboard's data comes from: the history (a file or a lake), read per query.

DuckDB lets one process write a file, and a read-only connection that stays open blocks that
writer. So the dashboard never keeps a connection between page views: the queries of one page
render share one connection from `history.store.db.open_read` (`render_reads`), opened at the
render's first query and closed when the render ends; outside a render every query opens its
own. (Opening the 1M-result file costs 0.1-0.5 s, and a cold page ran 5 to 13 queries.) Results are cached by Streamlit
(`cached_query`) under a key that includes the file's *signature* (size and modification
time of the database and its write-ahead log), so the moment an ingest commits, the next
page view reads fresh data, and while nothing changes no query reaches the file at all.

A lake (ATTNWATCH_DB=ducklake:postgres:...) has no file to stat: its signature is the id of its
latest snapshot, which every commit advances, read on this process's shared lake reader.
"""

from __future__ import annotations

import os
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

import pandas as pd
import streamlit as st

from attnwatch.history.store.db import open_read, upgrade
from attnwatch.history.errors import FaultError, HistoryNotFoundError, SchemaTooNewError
from attnwatch.history.store.lake import current_snapshot
from attnwatch.history.store.location import HistoryLocation, default_location, parse_location

# Seconds a cached result may be served even if the signature did not change (belt and braces
# against a file system with coarse mtimes).
CACHE_TTL_S = 600
CACHE_MAX_ENTRIES = 256
T = TypeVar("T")


class HistoryUnavailable(Exception):
    """The history could not be read now (missing, being written, or damaged); the message says which."""


@dataclass(frozen=True)
class Source:
    """One version of the history: its location's text (`path`, what pages show), what it looked
    like when read, and the location itself (parsed once, by `current_source`), which every read opens."""

    path: str
    signature: tuple[int, ...]
    location: HistoryLocation = field(compare=False)

    @property
    def exists(self) -> bool:
        return bool(self.signature and self.signature[0])


def _stat(path: Path) -> tuple[int, int]:
    try:
        st_ = path.stat()
    except FileNotFoundError:
        return (0, 0)
    return (st_.st_mtime_ns, st_.st_size)


def current_source(path: str | os.PathLike[str] | None = None) -> Source:
    """The history named by `path`, else ATTNWATCH_DB (or the default path), with its current
    signature: the dashboard's one reading of its setting per page view."""
    location = parse_location(path) if path is not None else default_location()
    if location.is_lake:
        return Source(location.label, _lake_signature(location), location)
    db = location.file
    main = _stat(db)
    wal = _stat(db.with_name(db.name + ".wal"))
    exists = 1 if db.exists() else 0
    return Source(str(db), (exists, *main, *wal), location)


def _lake_signature(location: HistoryLocation) -> tuple[int, ...]:
    """(1, latest snapshot id); (0,) when the lake was never created; (1, -1) when unreadable
    now (the query that follows reports why)."""
    try:
        with open_read(location) as con:
            return (1, current_snapshot(con))
    except HistoryNotFoundError:
        return (0,)
    except Exception:  # duckdb and the catalog raise many types; read_frame shows the message
        return (1, -1)


def read_frame(source: Source, sql: str, params: Sequence[Any] | None = None) -> pd.DataFrame:
    """Run one read-only query on a fresh connection and close it before returning."""
    return read_frames(source, lambda query: query(sql, params))


class _RenderReads(threading.local):
    """This thread's page render: its source, and the connection its queries share once opened."""

    source: Source | None = None
    stack: ExitStack | None = None
    con: Any = None


_RENDER = _RenderReads()


@contextmanager
def render_reads(source: Source) -> Iterator[None]:
    """Within this block (one page render, in this thread), queries of `source` share one
    read-only connection, opened by the first of them and closed when the block ends, so a
    writer waits at most one render for it. A query that fails on it is tried once more on a
    fresh connection of its own, which reports the failure as every read does."""
    if _RENDER.source is not None:  # nested: the outer render's connection serves
        yield
        return
    _RENDER.source = source
    try:
        yield
    finally:
        stack = _RENDER.stack
        _RENDER.source, _RENDER.stack, _RENDER.con = None, None, None
        if stack is not None:
            try:
                stack.close()
            except Exception:  # closing a read connection: nothing of the page's is lost
                pass


def _render_connection(source: Source):
    """The render's shared connection for `source` (opened now if need be), or None."""
    if _RENDER.source is None or _RENDER.source.path != source.path or not source.exists:
        return None
    if _RENDER.con is None:
        stack = ExitStack()
        try:
            _RENDER.con = stack.enter_context(open_read(source.location))
        except Exception:  # the query's own connection will say why
            stack.close()
            return None
        _RENDER.stack = stack
    return _RENDER.con


def _drop_render_connection() -> None:
    stack = _RENDER.stack
    _RENDER.stack, _RENDER.con = None, None
    if stack is not None:
        try:
            stack.close()
        except Exception:
            pass


def read_frames(source: Source, body: Callable[[Callable[..., pd.DataFrame]], T]) -> T:
    """`body(query)` on one read-only connection, where `query(sql, params)` returns a
    DataFrame: for a page that needs several queries at once (opening the 1M-result history
    costs 0.1-0.5 s per connection, more than most of its queries). Inside `render_reads` the
    render's shared connection; otherwise a fresh one, closed before returning."""
    if not source.exists:
        raise HistoryUnavailable(f"no history at {source.path} yet: ingest a run bundle first")
    shared = _render_connection(source)
    if shared is not None:
        try:
            return body(lambda sql, params=None: shared.execute(sql, list(params or [])).df())
        except Exception:  # tried again below on a connection of its own, which names any fault
            _drop_render_connection()
    try:
        with open_read(source.location) as con:
            return body(lambda sql, params=None: con.execute(sql, list(params or [])).df())
    except HistoryUnavailable:
        raise
    except FaultError as exc:  # its reason: no path, binary or PID on a page (history.store.faults)
        raise HistoryUnavailable(f"could not read the history: {exc.reason}") from None
    except Exception as exc:  # duckdb raises many types; the page shows one clear line
        raise HistoryUnavailable(f"could not read {source.path}: {type(exc).__name__}: {exc}") from exc


@st.cache_resource(show_spinner=False, max_entries=CACHE_MAX_ENTRIES)
def schema_notice(source: Source) -> tuple[str, str] | None:
    """Bring a history written by an older attnwatch up to date once per file version.

    Readers never migrate on open, so such a history lacks the newer views (the Kernel page's
    roofline, say). The first page view applies the pending migrations (read-only check first,
    so a current history is never opened for writing); when that cannot be done (read-only
    file, a writer holding the lock) the answer is a warning the dashboard shows instead.
    Returns None, or (level, text) with level "info" or "warning".
    """
    if not source.exists:
        return None
    try:
        applied = upgrade(source.location, deadline_s=5.0)
    except SchemaTooNewError as exc:  # written by a newer attnwatch: only an upgrade of this one helps
        return ("warning", str(exc))
    except FaultError as exc:  # read-only, busy, full: its reason, without paths (history.store.faults)
        return (
            "warning",
            f"The history could not be brought up to this attnwatch's schema: {exc.reason} "
            "Pages that need newer views will fail until `attnwatch migrate` has run on it.",
        )
    except Exception as exc:  # duckdb raises many types; the dashboard shows one clear line
        return (
            "warning",
            f"{source.path} could not be brought up to this attnwatch's schema "
            f"({type(exc).__name__}: {exc}); pages that need newer views will fail until "
            "`attnwatch migrate` has run on it",
        )
    return ("info", f"{source.path} was brought up to schema {applied[-1]} on opening.") if applied else None


def cached_query(func):
    """Cache a query function's DataFrame per (source signature, arguments) for CACHE_TTL_S."""
    return st.cache_data(ttl=CACHE_TTL_S, max_entries=CACHE_MAX_ENTRIES, show_spinner=False)(func)
