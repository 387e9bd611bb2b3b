"""`attnwatch detect`: scan main's history for persistent steps and correctness failures.

Run after each main ingest. Reads the series on one connection and records new alerts in one
transaction (deduplicated: rerunning adds nothing). Prints what it found; exit 0 (alerts are
data, not a failed command) unless --fail-on-new is given and something new was found.
"""

from __future__ import annotations

from attnwatch.ci.errors import UserError
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.analysis.case_rules import load_case_rules

# history.store.db, history.detection.alerts and the scan need duckdb: imported when the command runs, so the CLI
# (and `attnwatch compare`) still starts on a GPU runner that has no duckdb installed.


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "detect",
        help="find change points and correctness failures on main; record alerts",
        description="Scan the default branch's series for persistent steps and correctness failures and record "
        "new alerts in one transaction (rerunning adds nothing). Exit 0 whatever was found, unless --fail-on-new.",
    )
    p.add_argument("--gpu", help="only this GPU's series (exact recorded name)")
    p.add_argument("--window", type=int, default=200, help="scan the last N main runs of each series (default 200)")
    p.add_argument(
        "--thresholds", help="thresholds TOML (default: history/analysis/thresholds.toml or $ATTNWATCH_THRESHOLDS)"
    )
    p.add_argument(
        "--case-rules",
        help="per-case min effect and ignore rules (default history/analysis/case_rules.toml or $ATTNWATCH_CASE_RULES)",
    )
    p.add_argument("--dry-run", action="store_true", help="report findings without recording them")
    p.add_argument(
        "--fail-on-new", action="store_true", help="exit 1 when a new regression or correctness alert is found"
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.history.store.lake_retry import retrying

    load_thresholds(None, args.thresholds)  # a broken thresholds file fails before the database is touched
    rules = load_case_rules(args.case_rules)  # so does a broken case rules file
    # On a lake, scanned and recorded again while the catalog is unreachable: findings are
    # deduplicated by key, and a resolved alert is not resolved twice, so a retry after a
    # COMMIT that landed records nothing twice.
    report, inserted, known, recovered = retrying(args.db, lambda: _scan_and_record(args, rules))
    print(
        f"attnwatch detect: {report.series_scanned} series scanned "
        f"({report.skipped_short} too short), {len(report.findings)} findings"
        f"{f' ({report.ignored} more on ignored cases)' if report.ignored else ''}, "
        f"{'not recorded (dry run)' if args.dry_run else f'{len(inserted)} new alerts, {known} already known'}, "
        f"{len(recovered)} alerts {'would resolve' if args.dry_run else 'resolved'} (series back within min effect)"
    )
    for f in report.findings:
        print(f"  {f.kind:<12} {f.case_id} [{f.gpu_name} @ {f.pool}] {f.metric}: {f.detail}")
    for r in recovered:
        print(f"  resolved     alert {r.alert_id} {r.case_id} {r.metric}: {r.note}")
    if not args.dry_run and (
        inserted or recovered
    ):  # recorded first; then told ($ATTNWATCH_WEBHOOK_URL, $ATTNWATCH_ALERT_ISSUES)
        from attnwatch.cli.commands.alerts import announce
        from attnwatch.history.detection.alerts import get_alerts

        from attnwatch.history.detection.ncu_cause import alert_causes, with_cause

        notes = {r.alert_id: r.note for r in recovered}
        alerts = get_alerts(args.db, [*inserted, *notes])
        causes = alert_causes(args.db, [a for a in alerts if a.alert_id not in notes])  # what the profiles say moved
        announce(
            [
                (a, "resolved", notes[a.alert_id], a.actor)
                if a.alert_id in notes
                else (a, "opened", with_cause(a.detail, causes.get(a.alert_id)), "attnwatch detect")
                for a in alerts
            ]
        )
    serious = [f for f in report.findings if f.kind in ("regression", "correctness")]
    return 1 if args.fail_on_new and serious else 0


def _scan_and_record(args, rules):
    from attnwatch.history.detection.alerts import record_alerts, resolve_in
    from attnwatch.history.store.db import exists, open_write
    from attnwatch.history.detection.recovery import ACTOR, find_recoveries
    from attnwatch.history.detection.scan import scan_history
    from attnwatch.history.store.transactions import write_transaction

    if not exists(args.db):  # open_write would create an empty history at a mistyped path
        raise UserError(f"{args.db}: no history here yet (ingest a bundle first, or check --db / ATTNWATCH_DB)")
    thresholds_for = lambda gpu: load_thresholds(gpu, args.thresholds)  # noqa: E731
    with open_write(args.db) as con:
        report = scan_history(con, thresholds_for, gpu=args.gpu, window=args.window, rules=rules)
        recovered = find_recoveries(con, thresholds_for, rules, args.gpu)
        if args.dry_run:
            return report, [], 0, recovered

        def record(c, claims):
            inserted, known = record_alerts(c, report.findings, claims)
            done = [r for r in recovered if resolve_in(c, claims, r.alert_id, r.note, ACTOR)]
            return inserted, known, done

        inserted, known, recovered = write_transaction(con, record, str(args.db))
    return report, inserted, known, recovered
