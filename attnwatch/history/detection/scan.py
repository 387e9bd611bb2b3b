"""Scan the main-branch history for persistent steps and correctness failures -> alerts.

"main" is the history's default branch (history.store.settings; `case_series` reads the same setting).

For every series (case x GPU model x pool, its points in the one series order every chart uses:
view `case_series`, history.contract.series_key) and each
metric — latency (`median_us`) and the gap to the operator's baseline (`gap_to_baseline`,
which cancels GPU-wide drift such as a driver or clock change) —
history.analysis.changepoints finds level shifts with a penalty from the series' own noise; a shift of
at least the GPU's min_effect that holds for min_persist runs becomes an alert. Correctness
failures on main are always alerts, one per failing streak. Dedup keys carry the commit of
the step, so rescans add nothing new; a step that PELT re-places a run or two away as more data
arrives is recognised as the same finding (`shift_tolerance`). A step whose runs before and
after used different kernel configurations (results.kernel_config: an autotuner's pick) says so
in its detail and in `config_change` ("before -> after"), apart from the commit it names.
Every step alert is attributed (history/analysis/attribution.py): the run before the step and the
run at it are compared for the variant's code fingerprint, the configuration, the environment and
the machine, and the alert stores the attribution and each change (from -> to).

Two hosts of one GPU model are two series unless their runners declared one pool: a constant
offset between hosts is then neither a step nor noise. Thresholds stay per GPU model
(history.analysis.thresholds): they describe how that model measures, and a pool is by
definition a set of GPUs that measure alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

from attnwatch.history.detection.alerts import NewAlert
from attnwatch.history.analysis.changepoints import significant_steps
from attnwatch.history.analysis.thresholds import Thresholds
from attnwatch.history.analysis.attribution import Attribution
from attnwatch.history.analysis.kernel_config import change_text, segment_change
from attnwatch.history.detection.step_attribution import attribute_step
from attnwatch.history.store.settings import default_branch
from attnwatch.history.analysis.case_rules import CaseRules
from attnwatch.history.contract.series_key import series_order

# Scanned columns of `case_series`: column -> label for people.
METRICS = {"median_us": "latency", "gap_to_baseline": "gap to baseline"}
# What a series point carries, read by name (views of migration 010).
POINT_COLUMNS = (
    "case_id",
    "series_gpu",
    "series_pool",
    "series_index",
    "run_id",
    "commit_sha",
    "median_us",
    "gap_to_baseline",
    "synthetic",
    "kernel_config",
)
SHIFT_TOLERANCE = 2  # runs either side of a step's commit that count as the same step


@dataclass
class ScanReport:
    series_scanned: int = 0
    findings: list[NewAlert] = field(default_factory=list)
    skipped_short: int = 0
    ignored: int = 0  # findings on cases an ignore rule covers (history/analysis/case_rules.toml)


def dedup_key(kind: str, case_id: str, gpu: str, metric: str, commit_sha: str, pool: str) -> str:
    return f"{kind}|{case_id}|{gpu}|{metric}|{commit_sha}|{pool}"


def _known_steps(con) -> set[tuple[str, str, str, str, str]]:
    """(case, GPU, pool, metric, commit) of every stored alert (pool backfilled by migration 006)."""
    rows = con.execute(
        "SELECT case_id, coalesce(gpu_name, ''), coalesce(pool, ''), metric, coalesce(commit_sha, '') FROM alerts"
    ).fetchall()
    return {tuple(r) for r in rows}


def _named_rows(cursor) -> list[dict]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def series_points(con, gpu: str | None, window: int) -> list[dict]:
    """The newest `window` points of every series (`case_series`, on `gpu` if given), each a dict
    of POINT_COLUMNS, grouped by series and in series order (history.contract.series_key)."""
    where = "WHERE series_gpu = ?" if gpu else ""
    params = [gpu] if gpu else []
    return _named_rows(
        con.execute(
            f"""
        SELECT {", ".join(POINT_COLUMNS)}
        FROM (SELECT *, row_number() OVER (PARTITION BY case_id, series_gpu, series_pool ORDER BY series_index DESC) AS back
              FROM case_series {where})
        WHERE back <= {int(window)}
        ORDER BY case_id, series_gpu, series_pool, series_index
        """,
            params,
        )
    )


def _step_findings(
    rows: list[dict],
    th: Thresholds,
    known: set,
    report: ScanReport,
    attribute: Callable[[str, str | None, str], Attribution | None] = lambda *_: None,
) -> None:
    case_id, gpu, pool = _series_key(rows[0])
    commits = [r["commit_sha"] for r in rows]
    for column, label in METRICS.items():
        points = [
            (i, r[column])
            for i, r in enumerate(rows)
            if r[column] is not None and math.isfinite(r[column]) and r[column] > 0
        ]
        if len(points) < th.min_series:
            report.skipped_short += 1
            continue
        report.series_scanned += 1
        values = [v for _, v in points]
        for step in significant_steps(
            values,
            min_effect=th.min_effect,
            min_persist=th.min_persist,
            penalty_scale=th.penalty_scale,
            sigma_floor=th.sigma_floor,
        ):
            row_index = points[step.index][0]
            nearby = commits[max(0, row_index - SHIFT_TOLERANCE) : row_index + SHIFT_TOLERANCE + 1]
            if any((case_id, gpu or "", pool or "", column, c or "") in known for c in nearby):
                continue
            kind = "regression" if step.ratio > 1 else "improvement"
            row = rows[row_index]
            sha = row["commit_sha"]
            synthetic = " (synthetic data)" if row["synthetic"] else ""
            config = config_step(rows, points, step)
            config_note = f"; {change_text(*config)} (a configuration change)" if config else ""
            before_run = rows[points[step.index - 1][0]]["run_id"] if step.index > 0 else None
            attribution = attribute(case_id, before_run, row["run_id"])
            report.findings.append(
                NewAlert(
                    dedup_key=dedup_key("step", case_id, gpu or "", column, sha or "", pool or ""),
                    kind=kind,
                    metric=column,
                    case_id=case_id,
                    gpu_name=gpu,
                    pool=pool,
                    run_id=row["run_id"],
                    commit_sha=sha,
                    baseline_value=step.before,
                    new_value=step.after,
                    change_pct=step.change * 100.0,
                    detail=(
                        f"{label} {step.change * 100:+.1f}% at {str(sha)[:12]}: median {step.before:.4g} over "
                        f"{step.points_before} runs before, {step.after:.4g} over {step.points_after} runs after"
                        f"{config_note}{synthetic}"
                    ),
                    config_change=f"{config[0]} -> {config[1]}" if config else None,
                    attribution=attribution.label if attribution else None,
                    attribution_changes=attribution.changes_json() if attribution else None,
                )
            )
            known.add((case_id, gpu or "", pool or "", column, sha or ""))


def config_step(rows: list[dict], points: list[tuple[int, float]], step) -> tuple[str, str] | None:
    """(configuration before, after) when the runs either side of a step used different kernel
    configurations (history.analysis.kernel_config: the usual one of each segment)."""
    before = points[step.index - step.points_before : step.index]
    after = points[step.index : step.index + step.points_after]
    return segment_change((rows[i]["kernel_config"] for i, _ in before), (rows[i]["kernel_config"] for i, _ in after))


def _correctness_findings(con, gpu: str | None, known: set, report: ScanReport) -> None:
    """One alert per streak of failing main runs of a case on a GPU model and pool, keyed by its first commit."""
    where = "AND u.series_gpu = ?" if gpu else ""
    params = [default_branch(con), *([gpu] if gpu else [])]
    rows = _named_rows(
        con.execute(
            f"""
        SELECT s.case_id, u.series_gpu, u.series_pool, u.run_id, u.commit_sha, s.passed,
               s.worst_max_abs_err, s.worst_rel_err, s.nonfinite
        FROM correctness_summaries s
        JOIN series_runs u USING (run_id)
        WHERE u.branch = ? {where}
        ORDER BY s.case_id, u.series_gpu, u.series_pool, {series_order("u")}
        """,
            params,
        )
    )
    previous_passed: dict[tuple[str, str, str], bool] = {}
    for row in rows:
        key = case_id, g, pool = _series_key(row)
        run_id, sha, passed = row["run_id"], row["commit_sha"], row["passed"]
        max_abs, rel, nonfinite = row["worst_max_abs_err"], row["worst_rel_err"], row["nonfinite"]
        new_streak = not passed and previous_passed.get(key, True)
        if new_streak and (case_id, g or "", pool or "", "correctness", sha or "") not in known:
            report.findings.append(
                NewAlert(
                    dedup_key=dedup_key("correctness", case_id, g or "", "correctness", sha or "", pool or ""),
                    kind="correctness",
                    metric="correctness",
                    case_id=case_id,
                    gpu_name=g,
                    pool=pool,
                    run_id=run_id,
                    commit_sha=sha,
                    baseline_value=None,
                    new_value=max_abs,
                    change_pct=None,
                    detail=(
                        f"correctness failed from {str(sha)[:12]}: max abs err {max_abs}, rel err {rel}, "
                        f"{nonfinite or 0} non-finite elements"
                    ),
                )
            )
            known.add((case_id, g or "", pool or "", "correctness", sha or ""))
        previous_passed[key] = bool(passed)


def _series_key(row: dict) -> tuple:
    return row["case_id"], row["series_gpu"], row["series_pool"]


def scan_history(
    con,
    thresholds_for: Callable[[str | None], Thresholds],
    *,
    gpu: str | None = None,
    window: int = 200,
    rules: CaseRules = CaseRules(),
) -> ScanReport:
    """All new findings over the last `window` main runs of every series (read-only on `con`).
    `rules` (history/analysis/case_rules.toml): a case's own min_effect; an ignored case's findings are
    counted in `ignored`, not returned."""
    report = ScanReport()
    known = _known_steps(con)
    rows = series_points(con, gpu, window)
    cache: dict[str | None, Thresholds] = {}
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or _series_key(rows[end]) != _series_key(rows[start]):
            g = rows[start]["series_gpu"]
            if g not in cache:
                cache[g] = thresholds_for(g)
            case_id = rows[start]["case_id"]
            th = cache[g]
            effect = rules.min_effect(case_id, g, th.min_effect)
            _step_findings(
                rows[start:end],
                th if effect == th.min_effect else replace(th, min_effect=effect),
                known,
                report,
                lambda case, before, after: attribute_step(con, case, before, after),
            )
            start = end
    _correctness_findings(con, gpu, known, report)
    kept = [f for f in report.findings if not rules.ignored(f.case_id, f.gpu_name)]
    report.ignored += len(report.findings) - len(kept)
    report.findings = kept
    return report
