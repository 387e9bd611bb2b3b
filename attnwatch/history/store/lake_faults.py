"""A lake's faults as one-line errors, and a retry for the ones that pass.

DuckDB's PostgreSQL and DuckLake extensions report a catalog problem as the text of the catalog
query that met it (a COMMIT's whole batch of INSERTs: thousands of characters) followed by
libpq's reason. `reason` keeps the reason; `translate` turns what a user can act on into a
HistoryError that the CLI prints as one line and the dashboard shows as one message:

  - the catalog cannot be reached (PostgreSQL restarting, stopped, the network gone):
    LakeUnavailableError with `transient` set, which history.store.lake_retry waits out;
  - the catalog database or role is gone, or the login is refused: LakeUnavailableError, not
    retried (waiting does not bring a dropped database back);
  - the role may only read (the dashboard's read-only role, docs/reference/history.md): ReadOnlyHistoryError;
  - a data file the catalog lists is missing (the data path removed or unmounted):
    LakeDataMissingError, naming the file but not the machine's directory.

history.store.lake_retry waits out the transient ones.
"""

from __future__ import annotations

import re

import duckdb

from attnwatch.history.errors import HistoryError

MAX_REASON = 200

# libpq / PostgreSQL texts of a connection that broke or a server that is not up (yet).
TRANSIENT_MARKERS = (
    "server closed the connection unexpectedly",
    "connection refused",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "terminating connection due to administrator command",
    "no connection to the server",
    "could not receive data from server",
    "could not send data to server",
    "connection reset by peer",
    "broken pipe",
    "ssl connection has been closed unexpectedly",
    "timeout expired",
    "connection timed out",
    "could not connect to server",
    "connection to server was lost",
    "could not translate host name",
    "network is unreachable",
    "no route to host",
    "connection is closed",
    # a COMMIT whose connection broke: libpq then fails the extension's ROLLBACK with no text
    'failed to execute query "rollback"',
    # a catalog connection that broke inside the extension without an error of its own: DuckDB
    # then refuses the transaction's next statement (seen after `pg_ctl restart` amid ingests)
    "current transaction is aborted",
)
# ... and of one that waiting does not mend.
PERMANENT_MARKERS = (
    "does not exist",
    "password authentication failed",
    "no pg_hba.conf entry",
    "authentication failed",
    "no password supplied",
)
MISSING_FILE = re.compile(
    r"(?:no such file or directory|no files found that match the pattern|"
    r"cannot open file|could not open file)",
    re.IGNORECASE,
)
# PostgreSQL refusing the role (not the OS refusing a file: "Permission denied", capitalised).
_READ_ONLY = re.compile(
    r"permission denied for (?:table|relation|schema|sequence|database|view)|must be owner of|"
    r"cannot execute \w+ in a read-only transaction"
)
_PARQUET = re.compile(r"([^/\s\"']+\.parquet)")


class LakeUnavailableError(HistoryError):
    """The lake cannot be opened or reached here; `transient` when waiting may help."""

    def __init__(self, message: str, transient: bool = False, why: str = "") -> None:
        super().__init__(message)
        self.transient, self.why = transient, why or message


class ReadOnlyHistoryError(HistoryError):
    """The catalog role may read the lake but not write it."""


class LakeDataMissingError(HistoryError):
    """A data file the lake's catalog lists is not in its data path."""


def reason(exc: BaseException) -> str:
    """The part of a DuckDB error a person reads: libpq's reason after any quoted catalog query,
    on one line, at most MAX_REASON characters; an internal error's stack trace (library paths
    of this machine) is left out."""
    text = " ".join(str(exc).split("Stack Trace:", 1)[0].split())
    if '": ' in text and ('query "' in text or 'COPY "' in text or 'Postgres at "' in text):
        text = text.rsplit('": ', 1)[1]
    if "failed: " in text:  # libpq: connection to server at "host", port N failed: FATAL: ...
        text = text.rsplit("failed: ", 1)[1]
    text = re.sub(r"^(?:[A-Za-z ]+ Error: )+", "", text)
    text = re.sub(r"^(?:ERROR|FATAL):\s+", "", text) or "the catalog connection broke without a reason"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"


def is_transient(text: str) -> bool:
    low = text.lower()
    return not any(m in low for m in PERMANENT_MARKERS) and any(m in low for m in TRANSIENT_MARKERS)


def translate(exc: BaseException, label: str) -> HistoryError | None:
    """The one-line error for a DuckDB error met on the lake `label`, or None when it is not a lake
    fault (a conflict, a bug: the caller re-raises it as it is)."""
    if not isinstance(exc, duckdb.Error):
        return None
    text = " ".join(str(exc).split())
    low = text.lower()
    why = reason(exc)
    if _READ_ONLY.search(text):
        return ReadOnlyHistoryError(
            f"{label}: this history is read-only for you (the catalog role may only read: {why}); "
            "nothing was changed. Writing needs the writers' role"
        )
    if is_transient(text):
        return LakeUnavailableError(
            f"{label}: lost the connection to the lake's PostgreSQL catalog: {why}", transient=True, why=why
        )
    if isinstance(exc, (duckdb.InternalException, duckdb.FatalException)):
        # DuckLake 1.5.5 can fail internally on the first catalog read after PostgreSQL restarted
        # ("Attempted to access index 0 within vector of size 0", seen amid a `pg_ctl restart`).
        # DuckDB invalidates the instance on any internal or fatal error (every later statement
        # of it fails as FATAL), and a new one (history.store.lake_retry;
        # history.store.lake.release keeps the old one unclosed) reads normally.
        return LakeUnavailableError(
            f"{label}: the lake extension failed after a catalog fault: {why}", transient=True, why=why
        )
    if any(m in low for m in PERMANENT_MARKERS) and ("fatal" in low or "postgres" in low or "ducklake" in low):
        return LakeUnavailableError(f"{label}: the lake's PostgreSQL catalog refused: {why}")
    found = _PARQUET.search(text)
    if isinstance(exc, duckdb.IOException) and MISSING_FILE.search(text) and found and "permission" not in low:
        name = found.group(1)
        return LakeDataMissingError(
            f"{label}: data file {name} is missing from the lake's data path "
            "(removed or unmounted?); restore it and retry"
        )
    return None
