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
    names = {
        "startup_s": "start-up",
        "builds_s": "builds",
        "fingerprint_s": "fingerprints",
        "correctness_s": "correctness",
        "timing_s": "timing",
        "judging_s": "judging",
        "profiling_s": "ncu",
        "other_s": "other",
    }
    return f"wall {times['wall_s']:.1f} s = " + " + ".join(f"{label} {times[k]:.1f}" for k, label in names.items())


def other_split(session, times: dict[str, float]) -> dict[str, float]:
    """`other_s` of `times` in three parts, for the log (compare.json keeps its parts):

    * `outside_s`: before the workers start (revisions, the base's checkout, the plan, the
      device) and after the rounds (stopping the workers, writing the round bundles and
      session.json, reading them back, removing the checkout);
    * `requests_s`: the measure requests' seconds that no worker stage reports (messages, each
      round's set-up in the workers), both sides;
    * `rest_s`: what remains (waiting on the slower side to be ready beyond the parts' maxima).
    """
    sides = [s.times for s in session.sides.values()]
    looks = session.measured.looks_s
    outside = times["wall_s"] - session.measured.wall_s - (times["judging_s"] - looks) - times["profiling_s"]
    requests = sum(t.requests_s - t.correctness_s - t.prepare_s - t.timing_s - t.probe_s for t in sides)
    return {
        "outside_s": round(outside, 3),
        "requests_s": round(requests, 3),
        "rest_s": round(times["other_s"] - outside - requests, 3),
    }


def format_other(split: dict[str, float]) -> str:
    return (
        f"other = outside the rounds {split['outside_s']:.1f} + requests beyond their stages "
        f"{split['requests_s']:.1f} + the rest {split['rest_s']:.1f}"
    )
