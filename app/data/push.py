"""The first page's data: what the last push changed, on every GPU at once.

For each GPU (and each host of a GPU model that ran on several: its pool, history.series_key,
a series of its own), the newest main run (whatever its status) is compared with the main run before it
(`runs.main_run_before`: the newest earlier main run that did not fail outright) case by case,
through the Compare page's own code (`compare.compare_runs`: stored medians, the interval from
both runs' samples, CI's verdict rule and the GPU's min_effect), so the two pages cannot
disagree. Each change then gets an answer to "is it a real slowdown" (`assess`) from what the
harness stored with both numbers (app.data.quality) and from gap-to-SDPA, which moves only when
the case moved relative to the baseline measured in the same run.
"""

from __future__ import annotations

import math

import pandas as pd

from app.data import compare, quality
from app.data.runs import main_run_before
from app.data.store import Source, cached_query, read_frame
from history.detection.thresholds import load_thresholds
from history.links import case_trend_query, commit_range

# `section` values, in the order the page shows them: regression, correctness, not measured,
# improvement, no interval (moved beyond min_effect, but no samples for an interval).
NO_SAMPLES = "ratio only (no samples stored)"


@cached_query
def newest_main_runs(source: Source) -> pd.DataFrame:
    """One row per GPU and pool: its newest main run, the run it is compared with, whether the
    newest run checked correctness at all (a run with no check has no failures to count), and
    `host`: the pool, named only where the GPU model ran on several."""
    heads = read_frame(
        source,
        """
        SELECT gpu, CASE WHEN count(*) OVER (PARTITION BY gpu) > 1 THEN pool END AS host, run_id, commit_sha,
               status, started_at, synthetic,
               EXISTS (SELECT 1 FROM correctness k WHERE k.run_id = newest.run_id) AS correctness_checked
        FROM (SELECT coalesce(gpu_name, device_kind) AS gpu, pool, run_id, commit_sha, status, started_at, synthetic
              FROM runs WHERE branch = 'main'
              QUALIFY row_number() OVER (PARTITION BY coalesce(gpu_name, device_kind), pool
                                         ORDER BY started_at DESC, run_id DESC) = 1) AS newest
        ORDER BY started_at DESC, gpu, host
        """,
    )
    heads["base_run"] = pd.Series([main_run_before(source, r) for r in heads["run_id"]], index=heads.index, dtype=object)
    bases = read_frame(source, "SELECT run_id AS base_run, commit_sha AS base_commit FROM runs WHERE list_contains(?, run_id)",
                       [[b for b in heads["base_run"] if b]])
    out = heads.merge(bases, on="base_run", how="left")
    return out.astype({"base_run": object, "base_commit": object, "host": object}).where(out.notna(), None)


def _classify(row, min_effect: float) -> str | None:
    if row.correctness in ("FAIL", "FAIL (base too)"):
        return "correctness"
    if row.verdict in ("regression", "improvement"):
        return row.verdict
    if str(row.verdict).startswith("head "):
        return "not measured"
    if row.verdict == NO_SAMPLES and _finite(row.ratio) and abs(row.ratio - 1) >= min_effect:
        return "no interval"  # moved by more than min_effect, but without samples there is no verdict
    return None


def _sure_effect(row) -> float:
    """How far the interval's nearer bound is from no change (the ratio itself without one)."""
    if row.verdict == "regression" and _finite(row.ratio_low):
        return float(row.ratio_low) - 1
    if row.verdict == "improvement" and _finite(row.ratio_high):
        return 1 - float(row.ratio_high)
    return abs(float(row.ratio) - 1) if _finite(row.ratio) else 0.0


def assess(row, min_effect: float) -> str:
    """Is a regression (or improvement) real? One line from the stored evidence:
    the interval (already beyond min_effect, or there is no verdict), the quality marks of both
    numbers, gap-to-SDPA (a GPU-wide change such as a clock or driver moves sdpa too and leaves
    the gap flat) and, for launch-bound cases, the graph-replay times."""
    if row.verdict not in ("regression", "improvement"):
        return ""
    doubts = []
    for side in ("base", "head"):
        if getattr(row, f"{side}_marks"):
            doubts.append(f"{side} {getattr(row, f'{side}_marks')}")
    base_graph, head_graph = row.base_graph_median_us, row.head_graph_median_us
    graph_note = ""
    if _finite(base_graph) and _finite(head_graph) and base_graph > 0:
        graph_change = head_graph / base_graph - 1
        graph_note = f"graph replay {graph_change * 100:+.1f}%"
        if abs(graph_change) < min_effect:
            return f"launch overhead, not the kernel: {graph_note} (within ±{min_effect:.0%})"
    gap_note = ""
    if _finite(row.base_gap) and _finite(row.head_gap) and row.base_gap > 0:
        gap_change = row.head_gap / row.base_gap - 1
        gap_note = f"gap-to-SDPA {gap_change * 100:+.1f}%"
        if abs(gap_change) < min_effect and row.variant != "sdpa":
            return f"GPU-wide? sdpa moved as much: {gap_note}" + (f"; {'; '.join(doubts)}" if doubts else "")
    evidence = "; ".join(x for x in (gap_note, graph_note) if x)
    if doubts:
        return "check: " + "; ".join(doubts) + (f" ({evidence})" if evidence else "")
    return "yes: clean samples on both sides" + (f", {evidence}" if evidence else "")


def _finite(value) -> bool:
    return value is not None and not pd.isna(value) and math.isfinite(float(value))


@cached_query
def push_changes(source: Source) -> pd.DataFrame:
    """Every case of every GPU's newest main run against the run before it, with `section`
    (regression, correctness, not measured, improvement, or None), `real` (assess) and the
    Trends query that shows the case around the push."""
    frames = []
    for pair in newest_main_runs(source).itertuples():
        if not isinstance(pair.base_run, str):  # the GPU's first main run: nothing before it
            continue
        table = compare.compare_runs(source, pair.base_run, pair.run_id, pair.gpu).copy()
        min_effect = load_thresholds(pair.gpu).min_effect
        table.insert(0, "gpu", pair.gpu)
        table.insert(1, "host", pair.host)
        table["base_run"], table["head_run"] = pair.base_run, pair.run_id
        table["section"] = [_classify(r, min_effect) for r in table.itertuples()]
        table["real"] = [assess(r, min_effect) for r in table.itertuples()]
        span = commit_range(pair.base_commit, pair.commit_sha)
        table["trend_query"] = [case_trend_query(pair.gpu, c, commits=span, host=pair.host) for c in table["case_id"]]
        if not pair.correctness_checked:
            table["correctness"] = "not run"
        frames.append(table)
    if not frames:
        return pd.DataFrame(columns=["gpu", "host", "case_id", "section", "verdict", "correctness", "real"])
    out = pd.concat(frames, ignore_index=True)
    out["sort_effect"] = [_sure_effect(r) for r in out.itertuples()]
    return out


def section(changes: pd.DataFrame, name: str) -> pd.DataFrame:
    """One section's rows, the largest sure change first (lower bound of the interval)."""
    rows = changes[changes["section"] == name]
    return rows.sort_values(["sort_effect", "gpu"], ascending=[False, True]) if not rows.empty else rows


def quality_caption(frames: list[pd.DataFrame]) -> list[str]:
    found = pd.concat([f[c] for f in frames for c in ("base_marks", "head_marks") if c in f] or [pd.Series([], dtype=object)])
    return quality.explain(found)
