"""Where a measured compare's wall time went, in the parts compare.json's `times` names.

Start-up and builds run on both sides at once (the slower side counts); fingerprinting is the
slower worker's plus the parent's selection; correctness and timing alternate between the sides
(both count); judging is the looks between rounds and the final verdicts; profiling is the ncu
pass; `other_s` is the rest of the wall time (checkouts, stopping workers, writing bundles).
"""

from __future__ import annotations

from attnwatch.ci.compare.report import TIME_PARTS


def time_breakdown(session, *, wall_s: float, judging_s: float, profiling_s: float) -> dict[str, float]:
    """compare.json's `times` for a measured compare (ci.compare.session.Session)."""
    sides = [s.times for s in session.sides.values()]
    parts = {
        "startup_s": max(t.startup_s for t in sides),
        "builds_s": max(t.build_s for t in sides),
        "fingerprint_s": max(t.fingerprint_s for t in sides) + session.select_s,
        "correctness_s": sum(t.correctness_s for t in sides),
        "timing_s": sum(t.prepare_s + t.timing_s + t.probe_s for t in sides),
        "judging_s": session.measured.looks_s + judging_s,
        "profiling_s": profiling_s,
    }
    parts["other_s"] = max(0.0, wall_s - sum(parts.values()))
    parts["wall_s"] = wall_s
    return {k: round(parts[k], 3) for k in TIME_PARTS}


def format_times(times: dict[str, float]) -> str:
    """The breakdown in one line: `wall 58.2 s = start-up 4.1 + builds 1.0 + ...`."""
    names = {"startup_s": "start-up", "builds_s": "builds", "fingerprint_s": "fingerprints",
             "correctness_s": "correctness", "timing_s": "timing", "judging_s": "judging",
             "profiling_s": "ncu", "other_s": "other"}
    return f"wall {times['wall_s']:.1f} s = " + " + ".join(f"{label} {times[k]:.1f}" for k, label in names.items())
