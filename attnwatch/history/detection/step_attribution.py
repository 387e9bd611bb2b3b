"""Read the two runs that bound a step and attribute it (history/analysis/attribution.py).

One query per step alert: the case's result in the run before the step and in the run at it,
with its run's environment and machine fields and the variant's code fingerprint
(variant_fingerprints, migration 015). Runs from before a column existed read NULL there, which
the attribution treats as "not recorded", never as "unchanged".
"""

from __future__ import annotations

from attnwatch.history.analysis.attribution import Attribution, attribute

from attnwatch.history.analysis.attribution import RUN_FIELDS as _RUN_FIELDS


def step_points(con, case_id: str, run_ids: list[str]) -> dict[str, dict]:
    """run id -> the point fields (attribution.POINT_FIELDS) of `case_id` in that run."""
    columns = ", ".join(f"u.{name}" for name in _RUN_FIELDS)
    cursor = con.execute(
        f"""
        SELECT r.run_id, f.code_digest, r.kernel_config, r.timing_recipe, r.throttled_samples, {columns}
        FROM results r
        JOIN runs u ON u.run_id = r.run_id
        LEFT JOIN variant_fingerprints f ON f.run_id = r.run_id AND f.variant = r.variant
        WHERE r.case_id = ? AND r.run_id IN (SELECT unnest(?::VARCHAR[]))
        """,
        [case_id, run_ids],
    )
    names = [d[0] for d in cursor.description]
    points = {}
    for row in cursor.fetchall():
        point = dict(zip(names, row))
        throttled = point.pop("throttled_samples")
        point["throttled"] = None if throttled is None else ("yes" if throttled > 0 else "no")
        points[point.pop("run_id")] = point
    return points


def attribute_step(con, case_id: str, before_run: str | None, after_run: str) -> Attribution | None:
    """The attribution of a step of `case_id` between two runs (None: the run before is unknown)."""
    if before_run is None:
        return None
    points = step_points(con, case_id, [before_run, after_run])
    if before_run not in points or after_run not in points:
        return None
    return attribute(points[before_run], points[after_run])
