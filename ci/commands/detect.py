"""`attnwatch detect`: scan main's history for persistent steps and correctness failures.

Run after each main ingest. Reads the series on one connection and records new alerts in one
transaction (deduplicated: rerunning adds nothing). Prints what it found; exit 0 (alerts are
data, not a failed command) unless --fail-on-new is given and something new was found.
"""

from __future__ import annotations

from attnwatch.ci.errors import UserError
from attnwatch.history.analysis.thresholds import load_thresholds

# history.store.db, history.detection.alerts and the scan need duckdb: imported when the command runs, so the CLI
# (and `attnwatch compare`) still starts on a GPU runner that has no duckdb installed.


def register(subparsers) -> None:
    p = subparsers.add_parser("detect", help="find change points and correctness failures on main; record alerts")
    p.add_argument("--gpu", help="only this GPU's series (exact recorded name)")
    p.add_argument("--window", type=int, default=200, help="scan the last N main runs of each series (default 200)")
    p.add_argument("--thresholds", help="thresholds TOML (default: history/analysis/thresholds.toml or $ATTNWATCH_THRESHOLDS)")
    p.add_argument("--dry-run", action="store_true", help="report findings without recording them")
    p.add_argument("--fail-on-new", action="store_true", help="exit 1 when a new regression or correctness alert is found")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.history.store.lake_retry import retrying

    load_thresholds(None, args.thresholds)  # a broken thresholds file fails before the database is touched
    # On a lake, scanned and recorded again while the catalog is unreachable: findings are
    # deduplicated by key, so a retry after a COMMIT that landed records nothing twice.
    report, inserted, known = retrying(args.db, lambda: _scan_and_record(args))
    print(f"attnwatch detect: {report.series_scanned} series scanned "
          f"({report.skipped_short} too short), {len(report.findings)} findings, "
          f"{'not recorded (dry run)' if args.dry_run else f'{len(inserted)} new alerts, {known} already known'}")
    for f in report.findings:
        print(f"  {f.kind:<12} {f.case_id} [{f.gpu_name} @ {f.pool}] {f.metric}: {f.detail}")
    serious = [f for f in report.findings if f.kind in ("regression", "correctness")]
    return 1 if args.fail_on_new and serious else 0


def _scan_and_record(args):
    from attnwatch.history.detection.alerts import record_alerts
    from attnwatch.history.store.db import exists, open_write
    from attnwatch.history.detection.scan import scan_history
    from attnwatch.history.store.transactions import write_transaction

    if not exists(args.db):  # open_write would create an empty history at a mistyped path
        raise UserError(f"{args.db}: no history here yet (ingest a bundle first, or check --db / ATTNWATCH_DB)")
    with open_write(args.db) as con:
        report = scan_history(con, lambda gpu: load_thresholds(gpu, args.thresholds), gpu=args.gpu, window=args.window)
        if args.dry_run:
            return report, [], 0
        inserted, known = write_transaction(
            con, lambda c, claims: record_alerts(c, report.findings, claims), str(args.db))
    return report, inserted, known
