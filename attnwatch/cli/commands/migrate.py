"""`attnwatch migrate`: bring an existing history up to this attnwatch's schema.

Writers (ingest, detect, alerts) migrate on open; readers (the dashboard, `attnwatch sql`)
never write, so a history last written by an older attnwatch lacks the newer views until a
write or this command. `--check` only reports, and exits 1 when migrations are pending.
On a lake location that has no lake yet, this command creates it (with $ATTNWATCH_LAKE_DATA as
its data path): the one step to take before pointing runners at a new team history.
"""

from __future__ import annotations

from attnwatch.cli.commands import add_lock_timeout


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "migrate",
        help="apply pending schema migrations to the history",
        description="Apply the numbered schema migrations the history still lacks (each in its own "
        "transaction). A history newer than this attnwatch is refused, never altered.",
    )
    p.add_argument("--check", action="store_true", help="report only; exit 1 when migrations are pending")
    add_lock_timeout(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    # Imported here: duckdb is not installed on GPU runners, where the CLI must still load.
    from attnwatch.history.store.db import exists, migrate_history, open_write, schema_version
    from attnwatch.history.store.migrations import code_schema_version

    location = args.db
    if location.is_lake and not args.check and not exists(location):
        with open_write(location, deadline_s=args.lock_timeout):
            pass
        print(f"{location.label}: created a lake at schema {code_schema_version()} (data under {location.data_path})")
        return 0
    if args.check:
        before, code = schema_version(location, deadline_s=args.lock_timeout)
        state = "current" if before == code else f"behind: {code - before} migration(s) pending"
        print(f"{location.label}: schema {before}, this attnwatch {code} ({state})")
        return 0 if before == code else 1
    print(report_line(location.label, migrate_history(location, deadline_s=args.lock_timeout)))
    return 0


def report_line(label: str, report) -> str:
    """What one migrate did, from what it found to what it left (history.store.db.MigrationReport)."""
    line = f"{label}: found at schema {report.found}, left at schema {report.left}"
    if report.applied:
        line += f" (applied {', '.join(f'{v:03d}' for v in report.applied)})"
    else:
        line += " (nothing to apply)"
    if report.seen != report.found:
        line += (
            f"; it was at schema {report.seen} when this migrate began: another process migrated it "
            f"to {report.found} while this one waited for it"
        )
    return line
