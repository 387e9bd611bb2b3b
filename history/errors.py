"""Errors a user can act on. Each names the file and the field it is about."""

from __future__ import annotations


class HistoryError(Exception):
    """Base class: printed by the CLI as one clear line, exit code 2, no traceback."""


class BundleError(HistoryError):
    """A bundle or benchmark file failed validation; nothing was written."""

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = str(path)
        self.field = field
        self.message = message
        super().__init__(f"{self.path}: {field}: {message}" if field else f"{self.path}: {message}")


class SchemaTooNewError(HistoryError):
    """The database was migrated by a newer attnwatch than this one."""


class LockTimeoutError(HistoryError):
    """Another process held the database's write lock past the deadline."""


class QueryError(HistoryError):
    """User SQL was refused or failed."""


class MigrationError(HistoryError):
    """An applied migration's text changed, or the migration files themselves are inconsistent."""


class HistoryNotFoundError(HistoryError):
    """A read was asked of a history file that does not exist."""
