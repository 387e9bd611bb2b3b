"""What a page shows before anyone chooses: taken from the data, never from alphabetical order.

The focus is what the first page, This push, leads its regressions with (app.data.push: the
newest push's first cause, its largest sure slowdown): its GPU, case and metric, so every page
opens on the regression the reader was just told about. Without a regression in the push, the
newest regression detection recorded that nobody resolved yet (by the start of the run where its
step lands); without one, the most-measured GPU. Dtypes and variants offered first are the ones
measured on that GPU, most-measured first.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnwatch.app.data import push
from attnwatch.app.data.store import Source, cached_query, read_frame

# Variants a trend shows by default when they were measured (the baseline and the team's fused
# kernels), before any other; the focus case's own variant always comes first.
PREFERRED_VARIANTS = ("sdpa", "triton_fa2", "cuda_wmma_cpasync")


@dataclass(frozen=True)
class Focus:
    gpu: str | None
    case_id: str | None = None
    metric: str | None = None
    variant: str | None = None
    shape_id: str | None = None
    dtype: str | None = None
    causal: bool | None = None


@cached_query
def focus(source: Source) -> Focus:
    """This push's first regression's GPU and case; else the newest unresolved regression
    alert's; else the most-measured GPU alone."""
    pushed = push_focus(source)
    if pushed is not None:
        return pushed
    newest = read_frame(
        source,
        """
        SELECT a.series_gpu AS gpu, a.case_id, a.metric, r.variant, r.shape_id, r.dtype, r.causal
        FROM series_alerts a
        LEFT JOIN results r ON r.run_id = a.run_id AND r.case_id = a.case_id
        WHERE a.kind = 'regression' AND a.status <> 'resolved'
        ORDER BY a.run_started_at DESC NULLS LAST, a.created_at DESC, a.alert_id DESC LIMIT 1
        """,
    )
    if not newest.empty:
        row = newest.iloc[0]
        return Focus(
            row.gpu,
            row.case_id,
            row.metric,
            row.variant,
            row.shape_id,
            row.dtype,
            None if row.causal is None else bool(row.causal),
        )
    busiest = read_frame(
        source, "SELECT series_gpu AS gpu FROM series_runs GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1"
    )
    return Focus(None if busiest.empty else busiest["gpu"].iloc[0])


def push_focus(source: Source) -> Focus | None:
    """The case This push lists first among its regressions (its first cause's first line), or None."""
    regressions = push.section(push.push_changes(source), "regression")
    if regressions.empty:
        return None
    first = push.causes(regressions)["rows"].iloc[0].iloc[0].to_dict()  # a row: .dtype would be the Series'
    return Focus(
        first["gpu"],
        first["case_id"],
        "median_us",
        first["variant"],
        first["shape_id"],
        first["dtype"],
        bool(first["causal"]),
    )


@cached_query
def measured_on(source: Source, gpu: str) -> dict[str, list]:
    """Variants, shapes and dtypes with results on `gpu`'s main runs, most-measured first."""
    frame = read_frame(
        source,
        """
        WITH picked AS (SELECT run_id FROM series_runs WHERE series_gpu = ?
                        ORDER BY started_at DESC LIMIT 50)
        SELECT variant, shape_id, dtype, count(*) AS n FROM results JOIN picked USING (run_id)
        WHERE status = 'ok' GROUP BY ALL
        """,
        [gpu],
    )

    def ranked(column: str) -> list:
        return frame.groupby(column)["n"].sum().sort_values(ascending=False, kind="stable").index.tolist()

    return {"variants": ranked("variant"), "shapes": ranked("shape_id"), "dtypes": ranked("dtype")}


def default_variants(measured: list[str], focus_variant: str | None, limit: int = 3) -> list[str]:
    """The focus variant, then the preferred ones measured here, else the most measured."""
    chosen = [v for v in (focus_variant, *PREFERRED_VARIANTS) if v and v in measured]
    chosen = list(dict.fromkeys(chosen))
    return chosen or measured[:limit]
