"""`attnwatch bisect`: find the commit of a step's range that made a case slower.

    attnwatch bisect --alert ID [--out DIR]                    the alert's case over its step's range
    attnwatch bisect --good SHA --bad SHA --case ID [--case ID ...]

Measures commits of the range (ci/bisect/oracle.py: one same-job compare of the good revision
against each, with the compare workers and interval) in the order of ci/bisect/search.py's
binary search: the bad revision first (the slowdown must reproduce here), then midpoints, an
undecided one measured once more with twice the rounds. Prints the culprit (SHA and subject)
with its interval against the good revision, the revisions measured and the wall time; or
"undecided between X and Y" with why. With --alert the outcome is recorded on the alert
(history/detection/bisects.py). Writes `bisect.json` and every compare's round bundles under --out.
Exit 0 when the culprit was found, 1 when undecided or the slowdown did not reproduce.

Only a step with a code part is bisected: an alert attributed to the configuration, the
environment or the machine alone, or to none of them (history/analysis/attribution.py), is
refused with what changed, since no commit of its range made it; `--force` measures it anyway.
An alert from before attribution, or over runs without fingerprints, is bisected (its code
cannot be ruled out) with a note saying so.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from attnwatch.ci.errors import UserError
from attnwatch.ci.variant_modules import add_arguments as add_variant_arguments
from attnwatch.history.analysis.ab import METHODS

if TYPE_CHECKING:  # the history's modules import duckdb, which a GPU runner may lack
    from attnwatch.history.detection.bisects import AlertTarget
    from attnwatch.history.store.location import HistoryLocation

RESULT_FILE = "bisect.json"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bisect",
        help="find the commit that made a case slower, by same-job compares",
        description="Binary-search a commit range (an alert's step with --alert, or --good/--bad with --case) by "
        "same-job compares of the good revision against each commit measured; print the culprit with its interval, "
        "or between which commits it stays undecided. Exit 1 when undecided or not reproduced.",
    )
    p.add_argument("--alert", type=int, help="bisect this alert's case over its step's commit range (needs --db)")
    p.add_argument("--good", help="a revision without the slowdown")
    p.add_argument("--bad", help="a later revision with it")
    p.add_argument("--case", action="append", help="case id to measure, variant/shape/dtype/causal (repeatable)")
    p.add_argument("--checkout", type=Path, default=Path("."), help="the git checkout to bisect (default: here)")
    p.add_argument(
        "--within", help="refuse a range not reachable from this revision (a trusted job: its default branch)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="round cap per compare (default: ci/run_config.toml [compare]); an undecided commit is "
        "measured once more with twice as many",
    )
    p.add_argument("--min-rounds", type=int, default=None, help="rounds before the first look")
    p.add_argument("--workers-per-side", type=int, default=None)
    p.add_argument("--method", choices=METHODS, default="rounds-t")
    p.add_argument("--thresholds", help="thresholds TOML (default history/analysis/thresholds.toml)")
    p.add_argument("--case-timeout", type=float, default=None)
    p.add_argument("--no-correctness", action="store_true", help="skip the correctness checks")
    add_variant_arguments(p)
    p.add_argument("--any-gpu", action="store_true", help="with --alert: measure although this GPU is not the alert's")
    p.add_argument(
        "--force",
        action="store_true",
        help="bisect although the step's (or the range's) attribution has no code part (configuration, "
        "environment, machine or noise)",
    )
    p.add_argument("--out", type=Path, default=Path("bisect-out"), help="output directory (default ./bisect-out)")
    p.set_defaults(func=_run)


def _target(args) -> tuple[str, str, list[str], AlertTarget | None, str | None]:
    """(good, bad, case ids, the alert's target or None, a note to print once the bisect starts)
    from --alert or --good/--bad/--case."""
    if args.alert is not None:
        if args.good or args.bad or args.case:
            raise UserError("--alert takes its revisions and case from the alert: no --good/--bad/--case with it")
        from attnwatch.history.detection.bisects import alert_target

        target = alert_target(args.db, args.alert)
        note = refuse_without_code(target, args.force)
        return target.good_sha, target.bad_sha, [target.case_id], target, note
    if not (args.good and args.bad and args.case):
        raise UserError("bisect needs --alert ID, or --good, --bad and at least one --case")
    return args.good, args.bad, list(args.case), None, None


def refuse_without_code(target, force: bool) -> str | None:
    """A UserError naming what moved when the alert's step has no code part (module doc); else
    the note to print when the bisect goes ahead on an unattributed step or under --force."""
    from attnwatch.history.analysis.attribution import UNKNOWN, has_code_part, stored_changes

    label = target.attribution
    if label is None or label == UNKNOWN:
        return (
            f"bisect: alert {target.alert_id}: {label or 'not attributed (an alert from before attribution)'}; "
            "the code cannot be ruled out, bisecting"
        )
    if has_code_part(label):
        return None
    changed = "; ".join(c.text() for c in stored_changes(target.attribution_changes)) or "nothing recorded changed"
    why = (
        f"alert {target.alert_id}: its step is attributed to {label} ({changed}), not to code: no commit of "
        f"{target.good_sha[:12]}..{target.bad_sha[:12]} changed {target.case_id.split('/')[0]}'s code"
    )
    if force:
        return f"bisect: --force: {why}; bisecting anyway"
    raise UserError(f"{why}; not bisected (pass --force to measure the range anyway)")


def refuse_range_without_code(db: HistoryLocation, case_ids: list[str], good: str, bad: str, force: bool) -> None:
    """--good/--bad/--case: where the history holds runs of every case at both revisions and none
    of their changes has a code part, a UserError naming what changed (`--force` measures)."""
    from attnwatch.history.detection.bisects import range_attributions

    try:
        found = range_attributions(db, case_ids, good, bad)
    except Exception:  # noqa: BLE001 - an unreadable history decides nothing here: bisect measures
        return
    if len(found) < len(case_ids) or any(a.has_code or a.label.startswith("unknown") for a in found.values()):
        return
    moved = "; ".join(f"{case}: {a.summary()}" for case, a in found.items())
    why = f"between {good[:12]} and {bad[:12]} no tracked case's code changed ({moved})"
    if force:
        print(f"bisect: --force: {why}; bisecting anyway", file=sys.stderr)
        return
    raise UserError(f"{why}; not bisected (pass --force to measure the range anyway)")


def _run(args) -> int:
    from attnwatch.ci.bisect.oracle import CompareOracle, commit_range, planned_cases, shape_set_of
    from attnwatch.ci.bisect.search import bisect
    from attnwatch.ci.compare.revisions import repo_root, resolve
    from attnwatch.ci.compare.setup import device_kind, session_options
    from attnwatch.ci.variant_modules import load_requested
    from attnwatch.cli.settings import measure_settings, variant_sources
    from attnwatch.history.analysis.thresholds import load_thresholds

    if args.rounds is not None and not 1 <= args.rounds <= 25:
        raise UserError(f"--rounds: expected 1..25 (a re-measure doubles it), got {args.rounds}")
    started = time.monotonic()
    good_ref, bad_ref, case_ids, target, note = _target(args)
    kind, gpu = device_kind()
    if target is not None and (target.gpu_name or "cpu") != (gpu or kind) and not args.any_gpu:
        raise UserError(
            f"alert {target.alert_id} is on {target.gpu_name}, this machine has {gpu or kind}: "
            "bisect it there (or pass --any-gpu)"
        )
    if note:
        print(note, file=sys.stderr)
    load_requested(variant_sources(args))
    cases = planned_cases(case_ids)
    repo = repo_root(args.checkout)
    good, bad = resolve(repo, good_ref), resolve(repo, bad_ref)
    if target is None:
        refuse_range_without_code(args.db, case_ids, good, bad, args.force)
    commits = commit_range(repo, good, bad, resolve(repo, args.within) if args.within else None)
    thresholds = load_thresholds(gpu or "cpu", args.thresholds)
    options = session_options(measure_settings(args, shapes=shape_set_of(cases)), kind, thresholds)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    log(
        f"bisect: {len(commits) - 1} commits after the good {good[:12]} up to {bad[:12]}, "
        f"{len(cases)} case(s), {options.design.describe()}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    with CompareOracle(repo, good, bad, cases, options, thresholds, args.out, log) as oracle:
        result = bisect(commits, oracle)
    wall_s = time.monotonic() - started
    from attnwatch.ci.bisect.report import outcome_line, print_report, write_result

    text = outcome_line(result, repo)
    print_report(result, repo, wall_s)
    write_result(args.out / RESULT_FILE, result, wall_s, text)
    if target is not None:
        from attnwatch.cli.commands.alerts import announce
        from attnwatch.history.detection.alerts import alert_events, get_alerts
        from attnwatch.history.detection.bisects import record_bisect

        if record_bisect(args.db, target.alert_id, result.culprit, text):
            event = alert_events(args.db, target.alert_id)[-1]
            announce([(get_alerts(args.db, [target.alert_id])[0], "bisected", event.note, event.actor)])
        print(f"bisect: recorded on alert {target.alert_id}")
    return 0 if result.outcome == "found" else 1
