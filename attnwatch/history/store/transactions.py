"""Write transactions that hold on a DuckLake as on a file: natural-key claims and conflict retry.

A history file has PRIMARY KEY / UNIQUE constraints and one writer at a time. A DuckLake has
neither: it rejects constraints, and many processes commit at once under optimistic concurrency.
At COMMIT, DuckLake compares the transaction's changes with every snapshot committed since it
began and aborts it on a *logical conflict* (ducklake.select, Conflict Resolution), and two
transactions that insert into one table never conflict. So on a lake two ingests of one bundle
would both insert it. What stands in for the key:

  a claim: the transaction creates an empty view `attnwatch_claims."<kind>:<sha256(key)>"`
  beside its rows. Two transactions that create a view of the same name conflict, so of two
  concurrent writers of one key exactly one commits; the other is rolled back and retried by
  `write_transaction`, and on its retry it finds the committed row and does nothing. Keys of
  different names never conflict, so writers of different runs proceed in parallel.

After the commit the claims are dropped in a second transaction (the row itself is the record
from then on: a later writer's snapshot contains it), so the catalog does not grow with claims.
A claim left behind by a crash between the two (kill -9, a lost connection) is stale: its row is
committed, and every writer that starts later sees the row and takes no claim. Should the row be
deleted afterwards, the next writer of that key finds the claim in its own snapshot and takes it
over (DROP VIEW IF EXISTS, then CREATE VIEW, in its transaction): two writers taking over one
stale claim still conflict, on the drop or on the create. `attnwatch history maintain` drops
whatever claims are left (history.store.maintain): a claim a snapshot shows is committed, and a
conflict is decided by what was committed since a transaction began, not by what still exists.

On a file every claim is a no-op (its constraints and the single writer do the job) and the
retry never fires, so callers have one code path for both.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from typing import Callable, TypeVar

import duckdb

from attnwatch.history.errors import HistoryError
from attnwatch.history.store.lake_faults import reason

CLAIM_SCHEMA = "attnwatch_claims"
FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0
T = TypeVar("T")
_CLAIM_TAKEN = re.compile(r'View with name "[A-Za-z0-9_]+:[0-9a-f]{40}" already exists')


class ConflictTimeoutError(HistoryError):
    """Concurrent writers kept conflicting with this transaction past its deadline."""


def is_lake(con) -> bool:
    """True when the connection's default database is a DuckLake (a local catalog look-up)."""
    row = con.execute("SELECT type FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return bool(row) and row[0] == "ducklake"


def is_conflict(exc: BaseException) -> bool:
    """A commit that lost to a concurrent one (retrying helps), as opposed to a real error."""
    text = str(exc)
    if isinstance(exc, duckdb.TransactionException):
        return "conflict" in text.lower() or "maximum retry count" in text
    # A claim that a concurrent writer committed after this transaction's snapshot was taken but
    # before its CREATE VIEW ran: DuckDB reports the name as taken (a stale claim this snapshot
    # shows was dropped just before, in Claims.take). Retrying sees the row.
    return isinstance(exc, duckdb.CatalogException) and bool(
        (CLAIM_SCHEMA in text and "already exists" in text) or _CLAIM_TAKEN.search(text)
    )


class Claims:
    """The claims one transaction takes; `take` is a no-op on a file."""

    def __init__(self, con, lake: bool) -> None:
        self.con, self.lake = con, lake
        self.names: list[str] = []

    def take(self, kind: str, key: str) -> None:
        if not self.lake:
            return
        name = f"{kind}:{hashlib.sha256(key.encode('utf-8')).hexdigest()[:40]}"
        # A claim this snapshot already shows is stale (its row was deleted since): take it over.
        self.con.execute(f'DROP VIEW IF EXISTS {CLAIM_SCHEMA}."{name}"')
        self.con.execute(f'CREATE VIEW {CLAIM_SCHEMA}."{name}" AS SELECT 1 AS claimed')
        self.names.append(name)


def ensure_claim_schema(con) -> None:
    """The schema claims live in; part of opening a lake for writing."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {CLAIM_SCHEMA}")


def write_transaction(
    con, body: Callable[[duckdb.DuckDBPyConnection, Claims], T], label: str, deadline_s: float = 300.0
) -> T:
    """Run `body(con, claims)` in one transaction; on a lake, retry it while it loses conflicts.

    The body must read what it depends on inside the transaction (it may run several times).
    Backoff: capped exponential with full jitter ("Exponential Backoff And Jitter", AWS
    Architecture Blog, 2015), until `deadline_s`, then ConflictTimeoutError naming the history.
    """
    lake = is_lake(con)
    give_up_at = time.monotonic() + deadline_s
    attempt = 0
    while True:
        claims = Claims(con, lake)
        con.execute("BEGIN TRANSACTION")
        try:
            result = body(con, claims)
            con.execute("COMMIT")
        except BaseException as exc:
            _rollback(con)
            if not (lake and is_conflict(exc)):
                raise
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                raise ConflictTimeoutError(
                    f"{label}: concurrent writers kept conflicting with this transaction for more than "
                    f"{deadline_s:g} s ({reason(exc)}); retry later"
                ) from exc
            time.sleep(min(remaining, random.uniform(0, min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2**attempt))))
            attempt += 1
            continue
        release(con, claims.names)
        return result


def release(con, names: list[str]) -> None:
    """Drop claims after their transaction committed; best effort (a leftover is harmless)."""
    if not names:
        return
    try:
        con.execute("BEGIN TRANSACTION")
        for name in names:
            con.execute(f'DROP VIEW IF EXISTS {CLAIM_SCHEMA}."{name}"')
        con.execute("COMMIT")
    except duckdb.Error:
        _rollback(con)


def _rollback(con) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # DuckLake already rolled back a failed COMMIT
