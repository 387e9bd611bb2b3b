"""The first page's data: what the last push changed, on every GPU at once.

For each GPU (and each host of a GPU model that ran on several: its pool, history.contract.series_key,
a series of its own), the newest main run (whatever its status) is compared with the main run before it
(the newest earlier main run that did not fail outright: the rule of `runs.main_run_before`,
here in one query for every GPU) case by case, through the Compare page's own code
(`compare.judge`: stored medians, the interval from both runs' samples, CI's verdict rule and
the GPU's min_effect), so the two pages cannot disagree. Each change then gets an answer to "is
it real" (`assess`) from what the harness stored with both numbers (app.data.quality) and from
the gap to the operator's baseline, which moves only when the case moved relative to the baseline measured in the same
run. "main" is the history's default branch (history.store.settings).

A newest run of the same commit as the run before it is a re-measurement (an A/A repeat): what
differs between the two is noise, so none of it is called a regression or an improvement
(section `repeat`); correctness failures and lost cases are still facts about the newest run.

Changes are grouped by cause (`causes`): one kernel variant slower on every shape, dtype and
GPU is one line with a count and the range of the change, not dozens.

Cost: the page is the dashboard's first, so it is read cold more than any other. Every pair's
rows and samples come from two queries on one connection (`store.read_frames`); opening the
1M-result history costs ~0.1 s a connection, which fourteen connections a load paid before.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard
from dataclasses import dataclass

import pandas as pd

from attnwatch.app.data import compare, quality
from attnwatch.app.data.store import Source, cached_query, read_frame, read_frames
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.analysis.tiers import percent
from attnwatch.history.detection import ncu_cause
from attnwatch.history.links import case_trend_query, commit_range, relative
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL

NO_SAMPLES = "ratio only (no samples stored)"
# `section` values, in the order the page shows them: correctness first (as the PR comment),
# then regression, not measured, improvement, no interval (moved beyond min_effect, but no
# samples for an interval), repeat (moved between two runs of one commit: noise).
SECTIONS = ("correctness", "regression", "not measured", "improvement", "no interval", "repeat")
# The question each change section answers per line: a slowdown for regressions, a speed-up for
# improvements (`assess` answers either from the same evidence).
QUESTION = {"regression": "real slowdown?", "improvement": "real speed-up?", "no interval": "real change?"}


@cached_query
def newest_main_runs(source: Source) -> pd.DataFrame:
    """One row per GPU and pool: its newest main run, the run it is compared with (`base_run`,
    None for a GPU's first main run), whether that is a run of the same commit (`same_commit`),
    whether the newest run checked correctness at all (a run with no check has no failures to
    count), `host`: the pool, named only where the GPU model ran on several, and `main_branch`,
    the default branch (read here: one connection fewer for the first page)."""
    out = read_frame(
        source,
        f"""
        WITH main AS (
            SELECT series_gpu AS gpu, series_pool AS pool, run_id, commit_sha, status, started_at, synthetic,
                   row_number() OVER (PARTITION BY series_gpu, series_pool ORDER BY started_at DESC, run_id DESC) AS back
            FROM series_runs WHERE branch = {DEFAULT_BRANCH_SQL}
        ),
        bases AS (
            SELECT gpu, pool, run_id AS base_run, commit_sha AS base_commit FROM main
            WHERE back > 1 AND status <> 'failed'
            QUALIFY row_number() OVER (PARTITION BY gpu, pool ORDER BY back) = 1
        )
        SELECT h.gpu, CASE WHEN count(*) OVER (PARTITION BY h.gpu) > 1 THEN h.pool END AS host, h.run_id,
               h.commit_sha, h.status, h.started_at, h.synthetic,
               EXISTS (SELECT 1 FROM correctness k WHERE k.run_id = h.run_id) AS correctness_checked,
               b.base_run, b.base_commit, coalesce(b.base_commit = h.commit_sha, false) AS same_commit,
               {DEFAULT_BRANCH_SQL} AS main_branch
        FROM main h LEFT JOIN bases b ON b.gpu = h.gpu AND b.pool IS NOT DISTINCT FROM h.pool
        WHERE h.back = 1
        ORDER BY h.started_at DESC, h.gpu, host
        """,
    )
    return out.astype({"base_run": object, "base_commit": object, "host": object}).where(out.notna(), None)


def _classify(row, min_effect: float, same_commit: bool) -> str | None:
    if row.correctness in ("FAIL", "FAIL (base too)"):
        return "correctness"
    if str(row.verdict).startswith("head "):
        return "not measured"
    moved = None
    if row.verdict in ("regression", "improvement"):
        moved = row.verdict
    elif row.verdict == NO_SAMPLES and _finite(row.ratio) and abs(row.ratio - 1) >= min_effect:
        moved = "no interval"  # moved by more than min_effect, but without samples there is no verdict
    return "repeat" if moved and same_commit else moved


def _sure_effect(row) -> float:
    """How far the interval's nearer bound is from no change (the ratio itself without one)."""
    low, high, ratio = (getattr(row, name, None) for name in ("ratio_low", "ratio_high", "ratio"))
    if row.verdict == "regression" and _finite(low):
        return float(low) - 1
    if row.verdict == "improvement" and _finite(high):
        return 1 - float(high)
    return abs(float(ratio) - 1) if _finite(ratio) else 0.0


def assess(row, min_effect: float) -> str:
    """Is a regression (or improvement) real? One line from the stored evidence:
    the interval (already beyond min_effect, or there is no verdict), the quality marks of both
    numbers, the gap to the operator's baseline (a GPU-wide change such as a clock or driver moves
    the baseline, e.g. sdpa, too and leaves the gap flat) and, for launch-bound cases, the graph-replay times."""
    if row.verdict not in ("regression", "improvement"):
        return ""
    # Unconverged samples widen the interval, which already carries their spread: once the whole
    # interval is beyond min_effect the change is decided whatever the convergence (+14.6% with a
    # ±0.15-point interval is real). Throttling and launch gaps are doubts about what was timed.
    decisive = _sure_effect(row) >= min_effect
    doubts = []
    for side in ("base", "head"):
        marks = [
            m
            for m in str(getattr(row, f"{side}_marks") or "").split("; ")
            if m and not (decisive and m.startswith("unconverged"))
        ]
        if marks:
            doubts.append(f"{side} {'; '.join(marks)}")
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
        baseline = _baseline_name(row)
        gap_note = f"gap to {baseline} {gap_change * 100:+.1f}%"
        if abs(gap_change) < min_effect and not _is_reference(row):
            return f"GPU-wide? {baseline} moved as much: {gap_note}" + (f"; {'; '.join(doubts)}" if doubts else "")
    evidence = "; ".join(x for x in (gap_note, graph_note) if x)
    if doubts:
        return "check: " + "; ".join(doubts) + (f" ({evidence})" if evidence else "")
    if decisive and (row.base_marks or row.head_marks):
        return f"yes: the interval clears ±{percent(min_effect)} (samples unconverged, already in the interval)" + (
            f", {evidence}" if evidence else ""
        )
    return "yes: clean samples on both sides" + (f", {evidence}" if evidence else "")


def _baseline_name(row) -> str:
    """The variant the gaps were taken against (results.baseline_variant), or "baseline"."""
    name = getattr(row, "baseline_variant", None)
    return name if isinstance(name, str) and name else "baseline"


def _is_reference(row) -> bool:
    """The operator's baseline variant (kernels.operators; the gaps are taken against it,
    ci.timing.derived.apply_gaps), known here by its own gap, 1 exactly on both sides: the app
    cannot import the registry, and a second copy of the name would be a second declaration."""
    return row.base_gap == 1.0 and row.head_gap == 1.0


def _finite(value: Any) -> TypeGuard[float]:
    return value is not None and not pd.isna(value) and math.isfinite(float(value))


def _pairs_and_samples(source: Source, compared: pd.DataFrame):
    """Every compared pair's rows (compare.RUN_PAIRS_SQL) and both runs' samples, on one connection."""
    bases, heads = list(compared["base_run"]), list(compared["run_id"])

    def body(query):
        rows = query(compare.RUN_PAIRS_SQL, [bases, heads])
        return rows, compare.samples_by_run(query(compare.RUN_SAMPLES_SQL, [bases + heads]))

    return read_frames(source, body)


def _every_interval(compared: pd.DataFrame, samples: dict) -> dict[str, dict]:
    """compare.run_intervals of every pair, computed in one call per confidence level: a case's
    interval depends only on its samples, the seed and its sample counts
    (history.analysis.ab.hierarchical_intervals), so it is the one each pair would get alone,
    while cases of equal counts on every GPU share one set of index draws. head run -> case -> interval."""
    by_confidence: dict[float, list] = {}
    for pair in compared.itertuples():
        by_confidence.setdefault(load_thresholds(pair.gpu).confidence, []).append(pair)
    out: dict[str, dict] = {}
    for confidence, pairs in by_confidence.items():
        base = {(p.run_id, c): v for p in pairs for c, v in samples.get(p.base_run, {}).items()}
        head = {(p.run_id, c): v for p in pairs for c, v in samples.get(p.run_id, {}).items()}
        for (run_id, case), interval in compare.run_intervals(base, head, confidence).items():
            out.setdefault(run_id, {})[case] = interval
    return out


@cached_query
def push_changes(source: Source) -> pd.DataFrame:
    """Every case of every GPU's newest main run against the run before it, with `section`
    (SECTIONS, or None), `real` (assess) and the Trends query that shows the case around the push
    (`trend_query`, and as a relative link, `plot`)."""
    pairs = newest_main_runs(source)
    compared = pairs[pairs["base_run"].notna()]
    if compared.empty:
        return pd.DataFrame(columns=["gpu", "host", "case_id", "section", "verdict", "correctness", "real"])
    rows, samples = _pairs_and_samples(source, compared)
    intervals = _every_interval(compared, samples)
    frames = []
    for pair in compared.itertuples():
        pair_rows = rows[rows["pair"] == pair.run_id].drop(columns="pair").reset_index(drop=True)
        table = compare.judge(
            pair_rows,
            samples.get(pair.base_run, {}),
            samples.get(pair.run_id, {}),
            pair.gpu,
            intervals.get(pair.run_id, {}),
        )
        min_effect = load_thresholds(pair.gpu).min_effect
        table.insert(0, "gpu", pair.gpu)
        table.insert(1, "host", pair.host)
        table["base_run"], table["head_run"] = pair.base_run, pair.run_id
        judged = [
            (_classify(r, min_effect, pair.same_commit), assess(r, min_effect), _sure_effect(r))
            for r in table.itertuples()
        ]
        table["section"], table["real"], table["sort_effect"] = ([j[k] for j in judged] for k in range(3))
        span = commit_range(pair.base_commit, pair.commit_sha)
        table["trend_query"] = [case_trend_query(pair.gpu, c, commits=span, host=pair.host) for c in table["case_id"]]
        table["plot"] = [relative("trends", q) if q else None for q in table["trend_query"]]  # once, not per render
        if not pair.correctness_checked:
            table["correctness"] = "not run"
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def section(changes: pd.DataFrame, name: str) -> pd.DataFrame:
    """One section's rows, the largest sure change first (lower bound of the interval)."""
    rows = changes[changes["section"] == name]
    return rows.sort_values(["sort_effect", "gpu"], ascending=[False, True]) if not rows.empty else rows


def _real_summary(answers: pd.Series) -> str:
    """'yes 40 · check 8': how many lines got each kind of answer (the text before its colon)."""
    kinds = answers.fillna("").map(lambda a: a.split(":")[0] if a else "—")
    return " · ".join(f"{k} {n}" for k, n in kinds.value_counts().items())


def causes(rows: pd.DataFrame) -> pd.DataFrame:
    """A section's rows grouped by cause: one group per kernel variant (a change in one kernel
    shows on every shape, dtype and GPU it runs on), largest sure change first. Per group: the
    count, the GPUs, the range of the change (Δ% of the medians), the lower bounds' range and how
    many lines got each answer to "is it real"; `rows` holds the group's lines in section order."""
    if rows.empty:
        return pd.DataFrame(columns=["variant", "cases", "gpus", "low_pct", "high_pct", "real", "rows"])
    groups = []
    for variant, members in rows.groupby("variant", sort=False):
        groups.append(
            {
                "variant": variant,
                "cases": len(members),
                "gpus": list(dict.fromkeys(members["gpu"])),
                "low_pct": float(members["delta_pct"].min()),
                "high_pct": float(members["delta_pct"].max()),
                "real": _real_summary(members["real"]),
                "rows": members,
                "order": float(members["sort_effect"].max()),
            }
        )
    return (
        pd.DataFrame(groups)
        .sort_values("order", ascending=False, kind="stable")
        .drop(columns="order")
        .reset_index(drop=True)
    )


def quality_caption(frames: list[pd.DataFrame]) -> list[str]:
    found = pd.concat(
        [f[c] for f in frames for c in ("base_marks", "head_marks") if c in f] or [pd.Series([], dtype=object)]
    )
    return quality.explain(found)


@cached_query
def other_branches(source: Source) -> pd.DataFrame:
    """Branches with runs other than the default one (most runs first): what an empty first page
    names when the runs are on a branch the history does not take as its mainline."""
    return read_frame(
        source,
        f"""
        SELECT branch, count(*) AS runs FROM series_runs
        WHERE branch IS NOT NULL AND branch <> {DEFAULT_BRANCH_SQL} AND pr_number IS NULL
        GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5
        """,
    )


@cached_query
def what_moved(source: Source, base_run: str, run_id: str) -> str:
    """Between a GPU's two compared runs: whose code changed, and each environment and machine
    change (history.analysis.attribution), so a push with no code behind its steps says so."""
    from attnwatch.history.analysis.attribution import RUN_FIELDS, moved_text

    def body(query):
        runs = query(f"SELECT run_id, {', '.join(RUN_FIELDS)} FROM runs WHERE run_id IN (?, ?)", [base_run, run_id])
        codes = query(
            "SELECT run_id, variant, code_digest FROM variant_fingerprints WHERE run_id IN (?, ?)", [base_run, run_id]
        )
        return runs, codes

    runs, codes = read_frames(source, body)
    rows = {r["run_id"]: {k: (None if pd.isna(v) else v) for k, v in r.items()} for r in runs.to_dict("records")}
    if base_run not in rows or run_id not in rows:
        return ""
    by_run = {rid: dict(zip(g["variant"], g["code_digest"])) for rid, g in codes.groupby("run_id")}
    return moved_text(rows[base_run], rows[run_id], by_run.get(base_run, {}), by_run.get(run_id, {}))


# The build report's figures a cause names (builds: ptxas's, per variant and run), with their unit.
BUILD_FIGURES = (
    ("registers_per_thread", "registers/thread", ""),
    ("spill_store_bytes", "spill stores", " B"),
    ("spill_load_bytes", "spill loads", " B"),
    ("stack_frame_bytes", "stack frame", " B"),
    ("shared_mem_bytes", "shared memory/block", " B"),
)
CAUSE_SECTIONS = ("regression", "improvement", "no interval")


@dataclass(frozen=True)
class CauseEvidence:
    """What the history holds about why one cause (a variant, in one section) moved, as the PR
    comment names it: the pushed commits with their messages, the build report's figures
    before → after (`build`: "" without a report on both sides), and the counter rules' cause
    (history.detection.ncu_cause, the alerts' and the PR comment's reading) of the cause's
    largest profiled case, with how many of its cases were profiled on both sides."""

    commits: tuple[tuple[str, str], ...]  # (sha, commit message)
    build: str
    counter_case: str | None
    counter_cause: str | None
    profiled: int
    cases: int


def build_change(before: dict | None, after: dict | None) -> str:
    """The build report's figures that differ, "registers/thread 157 → 128; spill stores 0 → 16 B";
    "unchanged: …" with the head's figures when none moved; "" without a report on both sides or
    without ptxas figures (a Triton build stores none)."""
    if not before or not after:
        return ""
    known = [
        (column, name, unit)
        for column, name, unit in BUILD_FIGURES
        if _finite(before.get(column)) and _finite(after.get(column))
    ]
    if not known:
        return ""
    moved = [f"{name} {int(before[c]):,} → {int(after[c]):,}{unit}" for c, name, unit in known if before[c] != after[c]]
    if moved:
        return "; ".join(moved)
    return "unchanged: " + ", ".join(f"{name} {int(after[c]):,}{unit}" for c, name, unit in known)


def _cause_kind(row) -> str:
    """How the counter rules read a step: as a slowdown or a speed-up."""
    return (
        "regression"
        if row.section == "regression" or (row.section == "no interval" and row.ratio > 1)
        else "improvement"
    )


@cached_query
def cause_evidence(source: Source) -> dict[tuple[str, str], CauseEvidence]:
    """(section, variant) -> CauseEvidence for every cause of the push's change sections, read on
    two connections (the build reports and commit messages, then the counters)."""
    changes = push_changes(source)
    rows = changes[changes["section"].isin(CAUSE_SECTIONS)] if "section" in changes else changes.iloc[:0]
    if rows.empty:
        return {}
    runs = sorted(set(rows["base_run"]) | set(rows["head_run"]))
    variants = sorted(set(rows["variant"]))

    def body(query):
        builds = query(
            f"SELECT run_id, variant, {', '.join(c for c, _, _ in BUILD_FIGURES)} FROM builds "
            "WHERE list_contains(?, run_id) AND list_contains(?, variant) AND ok",
            [runs, variants],
        )
        commits = query(
            "SELECT run_id, commit_sha, commit_message FROM series_runs WHERE list_contains(?, run_id)", [runs]
        )
        return builds, commits

    builds, commits = read_frames(source, body)
    build_of = {(r["run_id"], r["variant"]): r for r in builds.to_dict("records")}
    commit_of = {r["run_id"]: (r["commit_sha"] or "", r["commit_message"] or "") for r in commits.to_dict("records")}
    explained = ncu_cause.causes_of(
        source.location, [(_cause_kind(r), r.head_run, r.case_id) for r in rows.itertuples()]
    )
    out = {}
    for name in CAUSE_SECTIONS:
        for cause in causes(section(changes, name)).itertuples():
            members = list(cause.rows.itertuples())
            top = members[0]
            found = [
                (r.case_id, explained[(r.head_run, r.case_id)]) for r in members if (r.head_run, r.case_id) in explained
            ]
            heads = list(dict.fromkeys(r.head_run for r in members))
            out[(name, cause.variant)] = CauseEvidence(
                commits=tuple(dict.fromkeys(commit_of[h] for h in heads if h in commit_of)),
                build=build_change(
                    build_of.get((top.base_run, cause.variant)), build_of.get((top.head_run, cause.variant))
                ),
                counter_case=found[0][0] if found else None,
                counter_cause=found[0][1].cause if found else None,
                profiled=len(found),
                cases=len(members),
            )
    return out
