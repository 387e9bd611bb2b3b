"""Where a history lives: one DuckDB file (the default), or a DuckLake for a fleet of runners.

One setting names it, `ATTNWATCH_DB` (or `--db`):
  - a path: the embedded single-file history (`make demo`, a one-box team; no server);
  - `ducklake:postgres:<libpq connection string>`: a DuckLake whose catalog is that PostgreSQL
    database, e.g. `ducklake:postgres:dbname=attnwatch host=db.internal user=attnwatch`.
    Its data files live under `ATTNWATCH_LAKE_DATA`, a directory or an S3-compatible URL
    (`s3://bucket/prefix`). That path is needed only to create the lake: the catalog records it,
    so readers (the dashboard) need the catalog string alone.

A password never goes into the setting: user SQL can list attached databases and their paths,
so the connection string is visible to anyone with the SQL page. libpq's own means carry it
(PGPASSFILE / ~/.pgpass, PGPASSWORD, PGSERVICEFILE), and a connection string that contains one
is refused here. docs/design.md (fleet history) explains the choice of DuckLake on PostgreSQL.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from attnwatch.history.errors import HistoryError

LAKE_PREFIX = "ducklake:postgres:"
DATA_ENV = "ATTNWATCH_LAKE_DATA"
DB_ENV = "ATTNWATCH_DB"
_PASSWORD_KEYWORD = re.compile(r"(^|\s)password\s*=", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"^postgres(?:ql)?://[^/@\s]*:[^/@\s]*@", re.IGNORECASE)
# What DuckDB reads as a URL or an extension's prefix rather than a file: `name:` of two or more
# characters before any slash (`md:x`, `http://...`, `s3://...`, `sqlite:x.db`).
_PREFIXED = re.compile(r"^[^/\\:]{2,}:")


class LocationError(HistoryError):
    """ATTNWATCH_DB / --db / ATTNWATCH_LAKE_DATA does not name a usable history."""


@dataclass(frozen=True)
class HistoryLocation:
    """A history file (`path`) or a DuckLake (`catalog` + optional `data_path`)."""

    path: Path | None = None
    catalog: str | None = None
    data_path: str | None = None

    @property
    def is_lake(self) -> bool:
        return self.catalog is not None

    @property
    def file(self) -> Path:
        """`path`, for code that handles a history file (not is_lake): a lake has no file."""
        if self.path is None:
            raise TypeError(f"{self.label}: a DuckLake history has no file")
        return self.path

    @property
    def is_s3(self) -> bool:
        return bool(self.data_path and self.data_path.startswith("s3://"))

    @property
    def label(self) -> str:
        """What messages call this history: the file path, or the setting (which holds no password)."""
        return f"{LAKE_PREFIX}{self.catalog}" if self.is_lake else str(self.path)

    def __str__(self) -> str:
        return self.label

    def fields(self) -> dict[str, str | None]:
        """This location as JSON text can carry it to another process (`from_fields` reads it)."""
        return {
            "path": None if self.path is None else str(self.path),
            "catalog": self.catalog,
            "data_path": self.data_path,
        }

    @classmethod
    def from_fields(cls, fields: dict[str, str | None]) -> "HistoryLocation":
        """The location `fields()` wrote, as it was: not parsed again."""
        path = fields.get("path")
        return cls(
            path=None if path is None else Path(path), catalog=fields.get("catalog"), data_path=fields.get("data_path")
        )


def parse_location(value: "str | os.PathLike[str]", data_path: str | None = None) -> HistoryLocation:
    """The history a `--db` value names; `data_path` defaults to $ATTNWATCH_LAKE_DATA for a lake.
    The one place a setting's text becomes a location: each entry point (a command, the
    dashboard, a query's child process) calls it once and hands the location down."""
    text = os.fspath(value).strip()
    if not text:
        raise LocationError("the history location is empty (set ATTNWATCH_DB or --db)")
    if text.startswith("ducklake:") and not text.startswith(LAKE_PREFIX):
        raise LocationError(
            f"{text.split(' ')[0]}: a lake history is `{LAKE_PREFIX}<connection string>` "
            "(DuckLake with a PostgreSQL catalog is the one supported)"
        )
    if not text.startswith(LAKE_PREFIX):
        if _PREFIXED.match(text):
            raise LocationError(_prefixed(text))
        return HistoryLocation(path=Path(text).expanduser())
    catalog = text[len(LAKE_PREFIX) :].strip()
    if not catalog:
        raise LocationError(
            f"{text}: no PostgreSQL connection string after `{LAKE_PREFIX}` (e.g. dbname=attnwatch host=...)"
        )
    if _PASSWORD_KEYWORD.search(catalog) or _URI_PASSWORD.match(catalog):
        raise LocationError(
            f"{LAKE_PREFIX}...: the connection string holds a password; user SQL can read attached "
            "databases' connection strings, so give the password through PGPASSFILE (~/.pgpass) or "
            "PGPASSWORD instead"
        )
    if "'" in catalog:
        raise LocationError(f"{LAKE_PREFIX}{catalog}: quotes are not supported in the connection string")
    data = data_path if data_path is not None else os.environ.get(DATA_ENV) or None
    return HistoryLocation(catalog=catalog, data_path=_data_path(data) if data else None)


def _prefixed(text: str) -> str:
    """Why a path with a URL scheme or an extension prefix is no history location (the file is
    never handed to DuckDB, which would load that extension or create the path's directories)."""
    if "://" in text:
        return (
            f"{text}: a URL, not a history location: a history is a local DuckDB file or "
            f"`{LAKE_PREFIX}...` (copy the file here first)"
        )
    scheme = text.split(":", 1)[0]
    return (
        f"{text}: not a history location: DuckDB reads `{scheme}:` as an extension's prefix; a history is "
        f"a DuckDB file's path (write ./{text} for a file of that name) or `{LAKE_PREFIX}...`"
    )


def _data_path(value: str) -> str:
    """An absolute directory, or an s3:// URL; always ending in '/' (DuckLake's own convention)."""
    value = value.strip()
    if "'" in value:
        raise LocationError(f"{DATA_ENV}={value}: quotes are not supported in the data path")
    if re.match(r"^[a-z][a-z0-9+.-]*://", value):
        if not value.startswith("s3://") or len(value) <= len("s3://"):
            raise LocationError(f"{DATA_ENV}={value}: a lake's data path is a directory or an s3://bucket/prefix URL")
    else:
        value = str(Path(value).expanduser().resolve())
    return value if value.endswith("/") else value + "/"


def default_file_path() -> Path:
    """The single-file default: $XDG_DATA_HOME/attnwatch/history.duckdb, outside any checkout,
    so neither a `git clean` nor a reinstall loses the history."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "attnwatch" / "history.duckdb"


def default_location() -> HistoryLocation:
    """$ATTNWATCH_DB (a path or a lake), else the single-file default."""
    explicit = os.environ.get(DB_ENV)
    return parse_location(explicit) if explicit else HistoryLocation(path=default_file_path())
