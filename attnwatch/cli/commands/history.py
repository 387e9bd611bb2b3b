"""`attnwatch history copy|recover|maintain|default-branch`.

`copy` moves a history between a file and a lake, verified:

    attnwatch history copy ~/.local/share/attnwatch/history.duckdb "ducklake:postgres:dbname=attnwatch host=db"
    attnwatch history copy "ducklake:postgres:dbname=attnwatch host=db" backup.duckdb

Each side is a file path or a `ducklake:postgres:` location (a new lake's data path comes from
$ATTNWATCH_LAKE_DATA). The copy goes through the Parquet export format (history.store.exchange), so
it merges into a destination that already has runs; afterwards every table's row count and
checksum are compared, and any difference is an error (exit 2) that names the table.

`recover` folds a history file's write-ahead log into the file (one DuckDB cannot replay when
opening, or a damaged one), keeping a backup of what it found, and says which of the log's
transactions were replayed and which were not; it exits 1 when any was not (history.store.recover):

    attnwatch --db ~/.local/share/attnwatch/history.duckdb history recover

`attnwatch history default-branch [BRANCH]` shows or sets the repository's default branch, the
mainline of the series, the alerts and the dashboard (history.store.settings).

`maintain` runs DuckLake's own maintenance functions on the history (history.store.maintain); a
scheduled workflow (.github/workflows/history-maintain.yml) runs it on the team lake. On a
history file it runs a CHECKPOINT and says that a file needs nothing more.
"""

from __future__ import annotations

from attnwatch.cli.commands import add_lock_timeout


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "history",
        help="copy a history between a file and a lake; recover a file that does "
        "not open; maintain a lake; its default branch (default-branch)",
        description="Look after the history itself: copy it between a file and a lake, recover "
        "a file that does not open, maintain a lake, show or set the default branch. "
        "`attnwatch history ACTION --help` describes each.",
    )
    sub = p.add_subparsers(dest="history_command", metavar="ACTION")
    sub.required = True
    c = sub.add_parser(
        "copy",
        help="copy every row of one history into another and verify counts and checksums",
        description="Copy SRC into DST (each a file path or ducklake:postgres:...), then compare row counts "
        "and a checksum per table. Copying again adds nothing.",
    )
    c.add_argument("source", metavar="SRC")
    c.add_argument("destination", metavar="DST")
    c.set_defaults(func=_copy, db_unused=True)  # SRC and DST name the histories (cli.main)
    r = sub.add_parser(
        "recover",
        help="make the --db history file open again when DuckDB cannot replay its write-ahead log",
        description="Back up the --db file and its write-ahead log, replay the log's committed transactions "
        "through an attached database and checkpoint them into the file (a damaged or unreadable part is set "
        "aside), then report which transactions were replayed, which were not, and what the file holds. Exits 1 "
        "when any part of the log was not replayed. Nothing is deleted.",
    )
    r.set_defaults(func=_recover)
    b = sub.add_parser(
        "default-branch",
        help="show or set the repository's default branch (the mainline of series and pages)",
        description="Without BRANCH, print the history's default branch; with it, record BRANCH as the "
        "default branch: the runs detection scans and the dashboard shows as main runs.",
    )
    b.add_argument("branch", metavar="BRANCH", nargs="?")
    add_lock_timeout(b)
    b.set_defaults(func=_default_branch)
    m = sub.add_parser(
        "maintain",
        help="compact a lake's files, expire old snapshots, delete files nothing needs",
        description="On a lake: drop leftover claims, merge adjacent files, expire snapshots "
        "older than --keep-days, delete files unreferenced for longer than --grace-hours (DuckLake's own functions). "
        "On a history file: a CHECKPOINT.",
    )
    m.add_argument(
        "--keep-days",
        type=float,
        default=None,
        metavar="DAYS",
        help="keep snapshots (time travel) this many days (default 7)",
    )
    m.add_argument(
        "--grace-hours",
        type=float,
        default=None,
        metavar="HOURS",
        help="delete unreferenced files only once they are this old: readers of an older snapshot and "
        "writers not yet committed still use newer ones (default 24)",
    )
    m.set_defaults(func=_maintain)


def _default_branch(args) -> int:
    from attnwatch.history.store.db import open_read, open_write
    from attnwatch.history.store.settings import check_branch, default_branch, set_default_branch

    if args.branch is None:
        with open_read(args.db) as con:
            print(default_branch(con))
        return 0
    check_branch(args.branch, "BRANCH")
    with open_write(args.db, deadline_s=args.lock_timeout) as con:
        changed = set_default_branch(con, args.branch, str(args.db))
    print(f"default branch: {args.branch}" + ("" if changed else " (unchanged)"))
    return 0


def _copy(args) -> int:
    # Imported here: duckdb is not installed on GPU runners, where the CLI must still load.
    from attnwatch.history.store.copy import copy_history
    from attnwatch.history.contract.repository import repo_setting
    from attnwatch.history.store.location import parse_location

    report = copy_history(parse_location(args.source), parse_location(args.destination), repo_setting(args.repo))
    for line in report.lines():
        print(line)
    return 0


def _recover(args) -> int:
    from attnwatch.history.store.recover import recover

    report = recover(args.db)
    for line in report.lines():
        print(line)
    return 0 if report.complete else 1


def _maintain(args) -> int:
    from attnwatch.ci.errors import UserError
    from attnwatch.history.store.maintain import GRACE_HOURS, KEEP_DAYS, maintain

    keep = KEEP_DAYS if args.keep_days is None else args.keep_days
    grace = GRACE_HOURS if args.grace_hours is None else args.grace_hours
    if keep < 0 or grace < 0:
        raise UserError("--keep-days and --grace-hours must not be negative")
    for line in maintain(args.db, keep_days=keep, grace_hours=grace).lines():
        print(line)
    return 0
