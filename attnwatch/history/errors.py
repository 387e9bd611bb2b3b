"""Errors a user can act on. Each names the file and the field it is about."""

from __future__ import annotations

from os import PathLike


class HistoryError(Exception):
    """Base class: printed by the CLI as one clear line, exit code 2, no traceback."""


class BundleError(HistoryError):
    """A bundle or benchmark file failed validation; nothing was written."""

    def __init__(self, path: str | PathLike[str], field: str, message: str) -> None:
        self.path = str(path)
        self.field = field
        self.message = message
        super().__init__(f"{self.path}: {field}: {message}" if field else f"{self.path}: {message}")


class SchemaTooNewError(HistoryError):
    """The database was migrated by a newer attnwatch than this one."""


class FaultError(HistoryError):
    """The file system, or another process, stopped a read or write of a history file.

    The message is one line: the history, what happened, what to do (history.store.faults words it).
    `reason` is the same without the history's path, for pages a dashboard user sees.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class LockTimeoutError(FaultError):
    """Another process held the database's write lock past the deadline."""


class DiskFullError(FaultError):
    """The disk (or a file-size limit) refused a write; the failed transaction was not kept."""


class ReadOnlyError(FaultError):
    """The history's file system is mounted read-only."""


class AccessDeniedError(FaultError):
    """This user may not open the history file (or its directory) as asked."""


class WalReplayError(FaultError):
    """DuckDB cannot replay the history's write-ahead log; `attnwatch history recover` can."""


class QueryError(HistoryError):
    """User SQL was refused or failed."""


class MigrationError(HistoryError):
    """An applied migration's text changed, or the migration files themselves are inconsistent."""


class HistoryNotFoundError(HistoryError):
    """A read was asked of a history file that does not exist."""


class NotAHistoryError(HistoryError):
    """The history path names something that is not a history file (a directory, a link to nothing, a
    file of another format): refused before DuckDB opens it, and nothing is created beside it."""
