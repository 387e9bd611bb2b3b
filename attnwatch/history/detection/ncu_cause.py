"""The counter rules' cause for stored alerts: the alert's run against the one before it.

An alert names a case and the run where its series stepped (history.detection.alerts). When that run was
profiled (`--ncu` on main and nightly runs: ncu_metrics), its counters are compared with those
of the latest earlier run of the same GPU and branch that profiled the case, and the rules of
ncu_rules.toml rank what moved beyond its noise (history/analysis/ncu_explain.py), after what
changed in the static code of the kernels the case launched, when both runs stored their
binaries' SASS and it differs (history.detection.stored_code: the compare's diff, so the line
is the compare's), and the exact counters that differ (instructions per opcode, launch
resources), and the kernels the two runs' calls launch differently are named; what each move accounts for is a share of the two
runs' timed change (their medians), as in a compare's cause. A regression alert is read
as "slower", an improvement as "faster"; correctness alerts have no counter cause.
"""

from __future__ import annotations

from typing import Iterable

from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.db import open_read
from attnwatch.history.analysis.kernel_launches import Launch, launch_counters
from attnwatch.history.analysis.ncu_explain import DURATION, Explanation, combine_kernels, explain
from attnwatch.history.analysis.sass_diff import case_code_change
from attnwatch.history.detection.stored_code import stored_code_changes

# (run, case) pairs as a table: every alert of a listing is explained with two queries, not
# three per alert (a lake answers each query over the network).
_PAIRS = "SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS case_id"
_EARLIER = f"""
WITH p AS ({_PAIRS}),
profiled AS (SELECT DISTINCT run_id, case_id FROM ncu_metrics WHERE case_id IN (SELECT case_id FROM p))
SELECT p.run_id, p.case_id, arg_max(r.run_id, r.started_at) AS base_run
FROM p
JOIN runs t ON t.run_id = p.run_id
JOIN runs r ON r.gpu_name IS NOT DISTINCT FROM t.gpu_name AND r.branch IS NOT DISTINCT FROM t.branch
           AND r.started_at < t.started_at AND NOT r.synthetic
JOIN profiled n ON n.run_id = r.run_id AND n.case_id = p.case_id
GROUP BY p.run_id, p.case_id
"""
_COUNTERS = f"""
WITH p AS ({_PAIRS})
SELECT m.run_id, m.case_id, m.kernel_index, m.kernel_name, m.metric_name, m.value
FROM ncu_metrics m JOIN p ON m.run_id = p.run_id AND m.case_id = p.case_id
WHERE m.value IS NOT NULL
"""
_MEDIANS = f"""
WITH p AS ({_PAIRS})
SELECT r.run_id, r.case_id, r.median_us
FROM results r JOIN p ON r.run_id = p.run_id AND r.case_id = p.case_id
WHERE r.median_us IS NOT NULL
"""
SPEED_KINDS = ("regression", "improvement")


Profile = tuple[dict[str, float], list[Launch]]  # a case's counters, its kernels combined, and its launches


def _profiles(con, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], Profile]:
    """(run, case) -> the case's counters in that run, its kernels combined, and its launches
    in launch order."""
    if not pairs:
        return {}
    runs, cases = zip(*sorted(pairs))
    kernels: dict[tuple[str, str], dict[int, tuple[str, dict[str, float]]]] = {}
    for run_id, case_id, index, kernel_name, name, value in con.execute(
        _COUNTERS, [list(runs), list(cases)]
    ).fetchall():
        kernels.setdefault((run_id, case_id), {}).setdefault(index, (kernel_name, {}))[1][name] = value
    out = {}
    for key, per_kernel in kernels.items():
        ordered = [per_kernel[index] for index in sorted(per_kernel)]
        out[key] = (
            combine_kernels(metrics for _, metrics in ordered),
            [Launch(kernel_name, metrics.get(DURATION), launch_counters(metrics)) for kernel_name, metrics in ordered],
        )
    return out


def explain_steps(con, steps: Iterable[tuple[str, str | None, str]]) -> dict[tuple[str, str], Explanation]:
    """(kind, run, case) steps -> (run, case) -> the ranked counter changes, for the speed steps
    whose run and the latest earlier run of the same GPU and branch both profiled the case."""
    wanted = {(run_id, case_id): kind for kind, run_id, case_id in steps if kind in SPEED_KINDS and run_id}
    if not wanted:
        return {}
    runs, cases = zip(*sorted(wanted))
    earlier = {
        (run_id, case_id): base
        for run_id, case_id, base in con.execute(_EARLIER, [list(runs), list(cases)]).fetchall()
        if base
    }
    pairs = set(wanted) | {(base, case_id) for (_, case_id), base in earlier.items()}
    profiles = _profiles(con, pairs)
    medians = _medians(con, pairs)
    code = stored_code_changes(con, earlier)
    out = {}
    for (run_id, case_id), base in earlier.items():
        head, before = profiles.get((run_id, case_id)), profiles.get((base, case_id))
        if head and before and head[0] and before[0]:
            launched = [launch.name for launch in (*before[1], *head[1])]
            out[(run_id, case_id)] = explain(
                before[0],
                head[0],
                slower=wanted[(run_id, case_id)] == "regression",
                launches=(before[1], head[1]),
                case_id=case_id,
                time_change_us=_change(medians.get((base, case_id)), medians.get((run_id, case_id))),
                code_change=case_code_change(code.get((run_id, case_id)), launched),
            )
    return out


def _medians(con, pairs: set[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """(run, case) -> the case's timed median in that run (µs)."""
    if not pairs:
        return {}
    runs, cases = zip(*sorted(pairs))
    return {(r, c): m for r, c, m in con.execute(_MEDIANS, [list(runs), list(cases)]).fetchall()}


def _change(base_us: float | None, head_us: float | None) -> float | None:
    """The timed change the rules' shares are of, as a compare reads it (its medians' difference);
    None, and ncu's duration change instead, where a run stored no median."""
    return head_us - base_us if base_us is not None and head_us is not None else None


def with_cause(detail: str | None, explanation: Explanation | None) -> str:
    """An alert's detail with its cause appended (`cause: ...`), as a notification shows it."""
    text = detail or ""
    if explanation is None:
        return text
    return f"{text}; cause: {explanation.cause}" if text else f"cause: {explanation.cause}"


def cause_of(location: HistoryLocation, kind: str, run_id: str | None, case_id: str) -> Explanation | None:
    """The ranked counter changes behind one step (the dashboard's alert), or None."""
    with open_read(location) as con:
        return explain_steps(con, [(kind, run_id, case_id)]).get((run_id, case_id)) if run_id is not None else None


def causes_of(
    location: HistoryLocation, steps: Iterable[tuple[str, str | None, str]]
) -> dict[tuple[str, str], Explanation]:
    """(kind, run, case) steps -> (run, case) -> Explanation, on one read connection (explain_steps)."""
    steps = list(steps)
    if not steps:
        return {}
    with open_read(location) as con:
        return explain_steps(con, steps)


def alert_causes(location: HistoryLocation, alerts: Iterable) -> dict[int, Explanation]:
    """alert_id -> Explanation for the alerts that have one, on one read connection."""
    alerts = list(alerts)
    if not alerts:
        return {}
    with open_read(location) as con:
        found = explain_steps(con, [(a.kind, a.run_id, a.case_id) for a in alerts])
    return {a.alert_id: found[(a.run_id, a.case_id)] for a in alerts if (a.run_id, a.case_id) in found}
