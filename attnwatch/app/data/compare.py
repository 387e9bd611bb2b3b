"""The Compare page's data: two runs side by side, case by case.

The medians, gaps and statuses are the stored ones. Where both runs stored their raw samples,
each case gets a head/base interval from the two-level bootstrap
(`history.analysis.ab.hierarchical_intervals`, `attnwatch compare --method hierarchical`) at
the GPU's confidence, and the verdict from CI's own rule and thresholds
(`history.analysis.ab.verdict`, the GPU's min_effect from the thresholds file). Its bounds are
not a PR comment's: a comment's interval is Student's paired t over a compare's rounds, which
needs two rounds per side, and here each run is one round (one process), so the bootstrap's
outer level has nothing to resample and run-to-run variation is not in the interval, as the
page's caption says. Without samples only the ratio of stored medians is shown, with no verdict.

The estimator resamples all cases of a run at once: a main run has hundreds of cases with
hundreds of samples each, and one-case-at-a-time resampling took over 6 s for 240 cases x 300
samples on the 2-core CI machine; the batched form takes 0.13-0.16 s there (load average ~13).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from attnwatch.app.data import quality
from attnwatch.app.data.store import Source, cached_query, read_frame
from attnwatch.history.analysis.ab import ABInterval, CaseKey, Round, hierarchical_intervals, verdict
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.analysis.tiers import FASTER_UNDER, SLOWER_UNDER, label, tier

RESAMPLES = 2000  # bootstrap resamples per case: the 95% interval's 2.5% tails rest on 50 resamples each
SEED = 0  # fixed: the same pair of runs always gets the same intervals
NO_SAMPLES = "ratio only (no samples stored)"  # the verdict of a case neither run stored samples of
# What a reader sees for a case without samples on a side: its stored medians moved by at least
# min_effect, or did not; either way there is no interval, so no regression or improvement.
MOVED_NO_INTERVAL = "moved (no interval)"
STILL_NO_INTERVAL = "within min_effect (no interval)"


def run_intervals(
    base: Mapping[CaseKey, Round], head: Mapping[CaseKey, Round], confidence: float
) -> dict[CaseKey, ABInterval]:
    """The head/base interval of every case both runs have samples of, each run one round."""
    measured = [case for case in sorted(set(base) & set(head)) if len(base[case]) and len(head[case])]
    return hierarchical_intervals(
        {c: [base[c]] for c in measured}, {c: [head[c]] for c in measured}, confidence, RESAMPLES, SEED
    )


def default_pair(
    recent: pd.DataFrame, head_id: str | None = None, *, main_branch: str
) -> tuple[str | None, str | None]:
    """Sensible first comparison: head = `head_id` or the newest complete run, base = the newest
    complete run of `main_branch` (the history's default branch) before it (a PR run is thus
    compared with main, a main run with its predecessor)."""
    complete = recent[recent["status"] == "complete"].sort_values("started_at", ascending=False)
    chosen = recent[recent["run_id"] == head_id]
    if complete.empty and chosen.empty:
        return None, None
    head = chosen.iloc[0] if not chosen.empty else complete.iloc[0]
    earlier = complete[
        (complete["branch"] == main_branch)
        & (complete["run_id"] != head.run_id)
        & (complete["started_at"] <= head.started_at)
    ]
    return (earlier.iloc[0].run_id if not earlier.empty else None), head.run_id


# Per side of a pair: what the harness stored about the number's quality (app.data.quality).
_SIDE_QUALITY = ("converged", "rel_spread", "throttled_samples", "n_samples", "graph_median_us", "timing_mode")


@cached_query
def run_pair(source: Source, base_run: str, head_run: str) -> pd.DataFrame:
    """Every case of either run: stored figures of both sides (full outer join on case_id), each
    side's correctness over seeds (NULL: not checked) and the quality columns `base_*`/`head_*`."""
    return read_frame(source, RUN_PAIRS_SQL, [[base_run], [head_run]]).drop(columns="pair")


# Any number of (base, head) pairs in one query (the first page compares one pair per GPU); `pair`
# is the head's run id. Parameters: $1 the base run ids, $2 the head run ids, in pair order. Each
# table is read once for all the runs (a filter, not a join: on the 1M-result history a join per
# side took 0.4 s, the filters 0.1 s).
RUN_PAIRS_SQL = f"""
    WITH pairs AS (SELECT unnest($1::VARCHAR[]) AS base_run, unnest($2::VARCHAR[]) AS head_run),
         picked AS (SELECT * FROM results WHERE list_contains(list_concat($1::VARCHAR[], $2::VARCHAR[]), run_id)),
         checked AS (SELECT run_id, case_id, passed, worst_max_abs_err FROM correctness_summaries
                     WHERE list_contains(list_concat($1::VARCHAR[], $2::VARCHAR[]), run_id)),
         a AS (SELECT p.head_run AS pair, r.* FROM pairs p JOIN picked r ON r.run_id = p.base_run),
         b AS (SELECT p.head_run AS pair, r.* FROM pairs p JOIN picked r ON r.run_id = p.head_run),
         ca AS (SELECT p.head_run AS pair, s.* FROM pairs p JOIN checked s ON s.run_id = p.base_run),
         cb AS (SELECT p.head_run AS pair, s.* FROM pairs p JOIN checked s ON s.run_id = p.head_run)
    SELECT coalesce(a.pair, b.pair) AS pair, coalesce(a.case_id, b.case_id) AS case_id,
           coalesce(a.variant, b.variant) AS variant, coalesce(a.shape_id, b.shape_id) AS shape_id,
           coalesce(a.dtype, b.dtype) AS dtype, coalesce(a.causal, b.causal) AS causal,
           a.status AS base_status, b.status AS head_status,
           a.median_us AS base_us, b.median_us AS head_us,
           b.median_us / a.median_us AS ratio,
           a.tflops AS base_tflops, b.tflops AS head_tflops,
           a.gap_to_baseline AS base_gap, b.gap_to_baseline AS head_gap,
           coalesce(b.baseline_variant, a.baseline_variant) AS baseline_variant,
           a.p10_us AS base_p10_us, a.p90_us AS base_p90_us, b.p10_us AS head_p10_us, b.p90_us AS head_p90_us,
           ca.passed AS base_correct, cb.passed AS head_correct, cb.worst_max_abs_err AS head_max_abs_err,
           {", ".join(f"a.{c} AS base_{c}, b.{c} AS head_{c}" for c in _SIDE_QUALITY)}
    FROM a FULL OUTER JOIN b ON a.pair = b.pair AND a.case_id = b.case_id
    LEFT JOIN ca ON ca.pair = coalesce(a.pair, b.pair) AND ca.case_id = coalesce(a.case_id, b.case_id)
    LEFT JOIN cb ON cb.pair = coalesce(a.pair, b.pair) AND cb.case_id = coalesce(a.case_id, b.case_id)
    ORDER BY pair, shape_id, dtype, causal, variant
"""

# The raw samples of several runs in one query: run_id, case_id, the samples in no particular
# order (the interval sorts them; ordering by sample_index cost 0.13 s of 0.21 s for six runs).
RUN_SAMPLES_SQL = """
    SELECT run_id, case_id, list(latency_us) AS s FROM samples
    WHERE list_contains(?, run_id) GROUP BY run_id, case_id
"""


def samples_by_run(frame: pd.DataFrame) -> dict[str, dict[str, np.ndarray]]:
    """RUN_SAMPLES_SQL's rows as run -> case -> float array (the cache pickles what a query
    function returns: a list of numpy scalars took ~0.3 s per 48k-sample run)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for row in frame.itertuples():
        out.setdefault(row.run_id, {})[row.case_id] = np.asarray(row.s, dtype=np.float64)
    return out


@cached_query
def run_samples(source: Source, run_id: str) -> dict[str, np.ndarray]:
    """Raw samples of one run per case (in no particular order), as float arrays."""
    return samples_by_run(read_frame(source, RUN_SAMPLES_SQL, [[run_id]])).get(run_id, {})


def _status_verdict(base_status: str | None, head_status: str | None) -> str | None:
    """A verdict from the cases' statuses alone, or None when both timed fine."""
    if pd.isna(base_status):
        return "new case (head only)"
    if pd.isna(head_status):
        return "case removed (base only)"
    if head_status != "ok" and base_status == "ok":
        return f"head {head_status}"
    if head_status != "ok":
        return f"{head_status} in both" if base_status == head_status else f"head {head_status} (base {base_status})"
    if base_status != "ok":
        return f"fixed (base {base_status})"
    return None


@cached_query
def compare_runs(source: Source, base_run: str, head_run: str, gpu: str | None) -> pd.DataFrame:
    """Per-case deltas with an interval and verdict where both sides stored samples."""
    return judge(
        run_pair(source, base_run, head_run), run_samples(source, base_run), run_samples(source, head_run), gpu
    )


def judge(
    pair: pd.DataFrame,
    base_samples: dict[str, np.ndarray],
    head_samples: dict[str, np.ndarray],
    gpu: str | None,
    intervals: dict[str, ABInterval] | None = None,
) -> pd.DataFrame:
    """A run pair's rows (RUN_PAIRS_SQL) with Δ%, interval, verdict, correctness and quality marks;
    `intervals`, when given, are run_intervals' of these samples computed with other pairs'."""
    thresholds = load_thresholds(gpu)
    if intervals is None:
        intervals = run_intervals(base_samples, head_samples, thresholds.confidence)
    lows, highs, verdicts = [], [], []
    for row in pair.itertuples():
        status = _status_verdict(row.base_status, row.head_status)
        low = high = None
        if status is not None:
            verdicts.append(status)
        elif row.case_id in intervals:
            iv = intervals[row.case_id]
            low, high = iv.low, iv.high
            verdicts.append(verdict(iv, thresholds.min_effect))
        else:
            verdicts.append(NO_SAMPLES)
        lows.append(low)
        highs.append(high)
    out = pair.copy()
    out["delta_pct"] = (out["ratio"] - 1.0) * 100.0
    out["ratio_low"] = pd.array(lows, dtype="Float64")
    out["ratio_high"] = pd.array(highs, dtype="Float64")
    out["verdict"] = verdicts
    out["correctness"] = [_correctness(b, h) for b, h in zip(out["base_correct"], out["head_correct"])]
    out["base_marks"] = quality.marks(out.rename(columns={"base_us": "base_median_us"}), "base_")
    out["head_marks"] = quality.marks(out.rename(columns={"head_us": "head_median_us"}), "head_")
    return out


# What the Compare page reads per case (`shown`), in the order its rows come: what breaks a
# kernel, then what got slower, then what moved without an interval to say so, the rest after.
SHOWN_ORDER = {
    "correctness FAIL": 0,
    "regression": 1,
    MOVED_NO_INTERVAL: 2,
    "improvement": 4,
    SLOWER_UNDER: 4.5,
    FASTER_UNDER: 4.6,
    STILL_NO_INTERVAL: 5,
    "no change": 6,
    "correctness FAIL (base too)": 3,
}


def shown_verdicts(table: pd.DataFrame, min_effect: float) -> pd.DataFrame:
    """`table` (compare_runs) with `shown`, the verdict a reader sees, and sorted for reading.

    A head that fails its correctness check reads 'correctness FAIL' whatever its timing did (a
    wrong kernel's speed means nothing). Without samples there is no interval, so, as This
    push does, the ratio of the stored medians alone decides only whether the case moved by at
    least min_effect (MOVED_NO_INTERVAL) or not. Status verdicts (crashed, new case) stay.
    A 'no change' whose interval excludes 1 reads 'slower, under the 2% threshold' (or faster:
    history.analysis.tiers), as in a PR comment. Rows: by SHOWN_ORDER (status verdicts between
    moved and improvements), then the largest change first."""
    shown, keys = [], []  # keys: what orders the row (SHOWN_ORDER), the tier for a timed verdict
    for verdict_, correctness, ratio, low, high in zip(
        table["verdict"], table["correctness"], table["ratio"], table["ratio_low"], table["ratio_high"]
    ):
        if correctness == "FAIL":
            key = text = "correctness FAIL"
        elif correctness == "FAIL (base too)":
            key = text = "correctness FAIL (base too)"
        elif verdict_ == NO_SAMPLES:
            moved = ratio is not None and not pd.isna(ratio) and abs(float(ratio) - 1.0) >= min_effect
            key = text = MOVED_NO_INTERVAL if moved else STILL_NO_INTERVAL
        else:
            key = tier(verdict_, None if pd.isna(low) else float(low), None if pd.isna(high) else float(high))
            text = label(key, min_effect)
        shown.append(text)
        keys.append(key)
    out = table.assign(shown=shown)
    order = pd.Series(keys, index=out.index).map(SHOWN_ORDER).fillna(2.5)
    size = (pd.to_numeric(out["ratio"], errors="coerce") - 1.0).abs().fillna(-1.0)
    return (
        out.assign(_order=order, _size=-size)
        .sort_values(["_order", "_size"], kind="stable")
        .drop(columns=["_order", "_size"])
        .reset_index(drop=True)
    )


def _correctness(base, head) -> str:
    """The head's correctness, with the base's beside a failure (a failure the base had too is
    not this change's): 'FAIL', 'FAIL (base too)', 'pass', 'not run'."""
    text = quality.correctness_text(head)
    if text == "FAIL" and quality.correctness_text(base) == "FAIL":
        return "FAIL (base too)"
    return text
