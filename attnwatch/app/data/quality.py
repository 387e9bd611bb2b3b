"""Honest numbers: which stored latencies are not a clean kernel time, and why.

Three marks, each from what the timing harness stored with the result (nothing re-measured):
  unconverged     `converged` is false: sampling hit its cap before IQR/median fell under the
                  target, so the median carries the spread shown (`rel_spread` = IQR/median);
  throttled       `throttled_samples` > 0: the SM clock reported a throttle reason during that
                  many samples; with `throttle_reasons`, the cap it names (history.analysis.caps:
                  "throttled: power cap (120 of 300 samples)");
  dispatch-bound  the case was under the graph threshold, so it was also timed as CUDA-graph
                  replays (`graph_median_us`), and the event median exceeds the replay median by
                  at least `min_event_over_graph` (number_marks.toml): the event time includes
                  host launch gaps. TFLOPS and gap to baseline are computed by CI from the event
                  median, so they inherit the gap; the graph-replay time is shown beside them.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from attnwatch.history.analysis.caps import cap_mark
from attnwatch.toml_reader import read_toml

MARKS_FILE = Path(__file__).resolve().parent / "number_marks.toml"

EXPLAIN = {
    "unconverged": (
        "sampling stopped at its cap (calls or time) before it had both enough calls and IQR/median under "
        "the target: the median rests on the samples and spread shown"
    ),
    "throttled": "the SM clock reported a throttle reason during some samples: those ran at a lower clock",
    "dispatch-bound": "event time includes host launch gaps: the CUDA-graph replay time (no gaps) is the kernel's",
}
BASIS = (
    "TFLOPS and gap to baseline are computed by CI from the CUDA-event median (µs), the headline for every case; "
    "for cases under the graph threshold the graph-replay median is shown beside it."
)


@lru_cache(maxsize=2)
def dispatch_ratio(path: Path = MARKS_FILE) -> float:
    data = read_toml(path, "number marks", ValueError)
    value = data["dispatch_bound"]["min_event_over_graph"]
    if not data["dispatch_bound"].get("min_event_over_graph_reason"):
        raise ValueError(f"{path}: dispatch_bound.min_event_over_graph_reason: every threshold needs its reason")
    return float(value)


def _column(frame: pd.DataFrame, name: str, fill) -> pd.Series:
    return frame[name] if name in frame else pd.Series(fill, index=frame.index)


def marks(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """Per row, the marks as short text ('' for a clean number): e.g. 'unconverged (300 samples, IQR/median 69.0%);
    dispatch-bound (graph 11.5 µs)'. Columns read (with `prefix`): median_us, converged,
    rel_spread, throttled_samples, n_samples, graph_median_us; missing columns count as clean."""
    if frame.empty:
        return pd.Series([], dtype=object, index=frame.index)
    median = pd.to_numeric(_column(frame, prefix + "median_us", np.nan), errors="coerce")
    converged = _column(frame, prefix + "converged", None)
    spread = pd.to_numeric(_column(frame, prefix + "rel_spread", np.nan), errors="coerce")
    throttled = pd.to_numeric(_column(frame, prefix + "throttled_samples", 0), errors="coerce").fillna(0)
    samples = pd.to_numeric(_column(frame, prefix + "n_samples", np.nan), errors="coerce")
    graph = pd.to_numeric(_column(frame, prefix + "graph_median_us", np.nan), errors="coerce")
    reasons = _column(frame, prefix + "throttle_reasons", None)
    ratio = dispatch_ratio()
    out = []
    for m, c, sp, th, n, g, why in zip(median, converged, spread, throttled, samples, graph, reasons):
        parts = []
        if np.isnan(m):
            out.append("")
            continue
        if c is False or (c is not None and not pd.isna(c) and not bool(c)):
            detail = ([f"{int(n)} samples"] if not np.isnan(n) else []) + (
                [f"IQR/median {_percent(sp)}"] if not np.isnan(sp) else []
            )
            parts.append("unconverged" + (f" ({', '.join(detail)})" if detail else ""))
        if th > 0:
            cap = cap_mark(why)
            parts.append(
                "throttled"
                + (f": {cap}" if cap else "")
                + f" ({int(th)}"
                + (f" of {int(n)}" if not np.isnan(n) else "")
                + " samples)"
            )
        if not np.isnan(g) and g > 0 and m / g >= ratio:
            parts.append(f"dispatch-bound (graph {g:.3g} µs)")
        out.append("; ".join(parts))
    return pd.Series(out, index=frame.index, dtype=object)


def recipe_text(recipe, normalised_us, discarded, gap_s) -> str:
    """How a result's samples were taken, for a hover or a table: '' for the plain recipe or a run
    before migration 013; else e.g. 'recipe band: 37 samples off the modal clock discarded;
    clock-normalised 2.4e+03 µs' (a cycle-space figure beside the latency, never in its place)."""
    if not isinstance(recipe, str) or recipe == "plain":
        return ""
    parts = [f"recipe {recipe}"]
    if discarded is not None and not pd.isna(discarded):
        parts.append(f"{int(discarded)} samples off the modal clock discarded")
    if gap_s is not None and not pd.isna(gap_s):
        parts.append(f"pacing gap {float(gap_s):.3g} s")
    if normalised_us is not None and not pd.isna(normalised_us):
        parts.append(f"clock-normalised {float(normalised_us):.4g} µs")
    return "; ".join(parts[:1]) + (": " + "; ".join(parts[1:]) if len(parts) > 1 else "")


def _percent(fraction: float) -> str:
    """A relative spread as a percent that never reads 0 for a small non-zero spread."""
    return f"{fraction:.2%}" if fraction < 0.01 else f"{fraction:.1%}"


def correctness_text(passed) -> str:
    """'pass', 'FAIL' or 'not run': a check that never ran is never shown as a pass or as 0 failures."""
    if passed is None or (not isinstance(passed, (bool, np.bool_)) and pd.isna(passed)):
        return "not run"
    return "pass" if bool(passed) else "FAIL"


def explain(found: pd.Series) -> list[str]:
    """One sentence per mark present in `found` (a marks() Series), for a caption under a table."""
    text = " ".join(found.dropna().astype(str))
    return [f"{name}: {why}." for name, why in EXPLAIN.items() if name in text]
