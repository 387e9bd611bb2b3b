"""`attnwatch history maintain`: keep a lake small and fast as it grows, with DuckLake's own functions.

Every ingest adds a few small Parquet files and snapshots to a lake (one file per table it
writes), and a writer killed mid-ingest leaves files no snapshot names. Queries slow down with
the file count (docs/benchmarks/history.md, Fleet
history). In order, each a DuckLake function of the pinned extension (ducklake.select,
Maintenance), each in its own transaction, retried on a conflict with concurrent writers:

  1. leftover claims (history.store.transactions) dropped: any claim a snapshot shows is committed
     and no longer decides a conflict;
  2. `ducklake_merge_adjacent_files`: each table's small files merged into few;
  3. `ducklake_expire_snapshots(older_than => now - keep)`: time travel kept for `keep_days`;
  4. `ducklake_cleanup_old_files(older_than => now - grace)`: files only expired snapshots (or
     merged-away files) referenced, once scheduled for deletion longer than the grace period;
  5. `ducklake_delete_orphaned_files(older_than => now - grace)`: files no snapshot names.

Not `ducklake_flush_inlined_data`: with DuckLake 1.5.5 a flush breaks every other attached
instance that had read the table (its next query fails with `INTERNAL Error: Attempted to
access index 0 within vector of size 0` in DuckLakeInlinedDataReader and the instance is
invalidated), i.e. the dashboard and any ingest in flight. attnwatch turns inlining off
(history.store.lake), so only rows written by an older attnwatch are inlined.

The grace period protects readers that still scan files of an older snapshot and, for orphans,
a concurrent writer's files not yet committed: its default (a day) is far beyond any ingest's
deadline. A file history has no such files: maintain runs a CHECKPOINT there (the write-ahead
log folded into the file) and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnwatch.history.store.db import exists, open_write
from attnwatch.history.errors import HistoryNotFoundError
from attnwatch.history.store.lake import ALIAS
from attnwatch.history.store.lake_retry import retrying
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.transactions import CLAIM_SCHEMA, write_transaction

KEEP_DAYS = 7.0
GRACE_HOURS = 24.0


@dataclass
class MaintainReport:
    label: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (step, what it did)

    def lines(self) -> list[str]:
        return [f"{step}: {done}" for step, done in self.steps] + [f"maintained {self.label}"]


def maintain(loc: HistoryLocation, keep_days: float = KEEP_DAYS, grace_hours: float = GRACE_HOURS) -> MaintainReport:
    """The steps of the module docstring on a lake; a CHECKPOINT on a file."""
    if keep_days < 0 or grace_hours < 0:
        raise ValueError("keep_days and grace_hours must not be negative")
    if not retrying(loc, lambda: exists(loc)):  # open_write would create an empty history at a mistyped path
        raise HistoryNotFoundError(f"{loc.label}: no history here to maintain (check --db / ATTNWATCH_DB)")
    report = MaintainReport(loc.label)
    if not loc.is_lake:
        with open_write(loc) as con:
            con.execute("CHECKPOINT")
        report.steps.append(
            (
                "checkpoint",
                "the write-ahead log folded into the file; a history file has no small "
                "files, snapshots or orphans, so there is nothing more to do",
            )
        )
        return report
    keep = f"now() - INTERVAL '{float(keep_days) * 86400:.0f} seconds'"
    grace = f"now() - INTERVAL '{float(grace_hours) * 3600:.0f} seconds'"
    steps = (
        (
            "merge adjacent files",
            "SELECT coalesce(sum(files_processed), 0), coalesce(sum(files_created), 0) "
            f"FROM ducklake_merge_adjacent_files('{ALIAS}')",
            "{} file(s) merged into {}",
        ),
        (
            "expire snapshots",
            f"SELECT count(*) FROM ducklake_expire_snapshots('{ALIAS}', older_than => {keep})",
            f"{{}} snapshot(s) older than {keep_days:g} day(s) expired",
        ),
        (
            "clean up old files",
            f"SELECT count(*) FROM ducklake_cleanup_old_files('{ALIAS}', older_than => {grace})",
            f"{{}} file(s) no kept snapshot needs deleted (scheduled over {grace_hours:g} h ago)",
        ),
        (
            "delete orphaned files",
            f"SELECT count(*) FROM ducklake_delete_orphaned_files('{ALIAS}', older_than => {grace})",
            f"{{}} file(s) no snapshot names deleted (older than {grace_hours:g} h)",
        ),
    )
    report.steps.append(("drop leftover claims", f"{retrying(loc, lambda: _drop_claims(loc))} claim(s) dropped"))
    for name, sql, done in steps:
        row = retrying(loc, lambda: _step(loc, sql))
        report.steps.append((name, done.format(*(int(v) for v in row))))
    return report


def _drop_claims(loc: HistoryLocation) -> int:
    with open_write(loc) as con:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? AND table_schema = ?",
                [ALIAS, CLAIM_SCHEMA],
            ).fetchall()
        ]
        write_transaction(
            con, lambda c, _claims: [c.execute(f'DROP VIEW IF EXISTS {CLAIM_SCHEMA}."{n}"') for n in names], loc.label
        )
        return len(names)


def _step(loc: HistoryLocation, sql: str) -> tuple:
    with open_write(loc) as con:
        return write_transaction(
            con, lambda c, _claims: c.execute(sql).fetchall()[0], loc.label
        )  # an aggregate: one row
