"""The history's settings: today one, its default branch.

The default branch is the mainline whose runs form the change-point series, the latest-main
views, the alerts and every dashboard page ("main runs"). It is a fact about the repository,
not about a run or a reader, so it is stored once in the history (`history_settings`, migration
007) and every reader asks `default_branch(con)`: detection, the views (which read the same
row), the dashboard. Where the value comes from (docs/design.md, "The default branch"): the GPU
workflow passes GitHub's `github.event.repository.default_branch` to
`attnwatch ingest --default-branch`, and `attnwatch history default-branch NAME` sets it by hand.
A history that never set it keeps `main`, the value migration 007 gave every history.
"""

from __future__ import annotations

import re

from attnwatch.history.errors import HistoryError
from attnwatch.history.store.transactions import write_transaction

DEFAULT_BRANCH = "default_branch"  # the setting's name in history_settings
# The default branch as a SQL expression, for queries that filter on it (the views of migration
# 007 read the same row): `WHERE u.branch = {DEFAULT_BRANCH_SQL}`.
DEFAULT_BRANCH_SQL = f"(SELECT value FROM history_settings WHERE name = '{DEFAULT_BRANCH}')"
# What a history that predates migration 007 (read by a reader that cannot migrate it) meant:
# migration 007 writes the same value into every history.
_BEFORE_SETTINGS = "main"
# git's ref-name rules (git-check-ref-format), the parts that can appear in a branch name.
_BRANCH = re.compile(r"(?!.*\.\.)(?!.*@\{)(?!/)(?!.*//)(?!.*/$)(?!.*\.lock$)(?!.*\.$)[^\x00-\x20\x7f~^:?*\[\\]{1,255}")


class SettingError(HistoryError):
    """A setting's value was refused."""


def check_branch(name: str, where: str = "default branch") -> str:
    """`name` if git would accept it as a branch name; else SettingError naming `where`."""
    if not isinstance(name, str) or not _BRANCH.fullmatch(name) or name.startswith("-"):
        raise SettingError(f"{where}: {name!r} is not a git branch name")
    return name


def default_branch(con) -> str:
    """The history's default branch (its mainline): the one place every reader asks."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'history_settings'"
    ).fetchone()[0]
    if not exists:
        return _BEFORE_SETTINGS
    row = con.execute(f"SELECT {DEFAULT_BRANCH_SQL}").fetchone()
    return row[0] if row and row[0] else _BEFORE_SETTINGS


def set_default_branch(con, name: str, label: str) -> bool:
    """Record `name` as the default branch (one transaction); True when it changed."""
    check_branch(name)

    def body(c, _claims) -> bool:
        if default_branch(c) == name:
            return False
        c.execute("DELETE FROM history_settings WHERE name = ?", [DEFAULT_BRANCH])
        c.execute("INSERT INTO history_settings VALUES (?, ?)", [DEFAULT_BRANCH, name])
        return True

    return write_transaction(con, body, label)
