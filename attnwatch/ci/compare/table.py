"""The compare result as a plain-text table for the job log."""

from __future__ import annotations

from attnwatch.ci.compare.report import CompareReport
from attnwatch.history.analysis.tiers import UNDER, label, tier


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(report: CompareReport) -> str:
    header = f"{'case':<44} {'verdict':<31} {'base us':>10} {'head us':>10} {'delta':>7} {'interval':>17} {'gap base->head':>15}"
    lines = [
        f"compare: head {report.head_sha[:12]} vs merge base {report.merge_base_sha[:12]} on {report.gpu_name}, "
        f"up to {report.rounds} rounds/side, {report.confidence:.0%} {report.method} interval, min effect {report.min_effect:.1%}",
        header,
        "-" * len(header),
    ]
    for c in report.cases:
        delta = "-" if c.ratio is None else f"{(c.ratio - 1) * 100:+.1f}%"
        interval = "-" if c.low is None or c.high is None else f"[{(c.low - 1) * 100:+.1f}%,{(c.high - 1) * 100:+.1f}%]"
        gap = f"{_f(c.base.gap_to_baseline, '.3f')}->{_f(c.head.gap_to_baseline, '.3f')}"
        flag = " INCORRECT" if c.correctness_failed else ""
        shown = label(tier(c.verdict, c.low, c.high), report.min_effect)  # a sure change under min_effect says so
        lines.append(
            f"{c.case_id[:44]:<44} {shown:<31} {_f(c.base.median_us, '.2f'):>10} {_f(c.head.median_us, '.2f'):>10} "
            f"{delta:>7} {interval:>17} {gap:>15}{flag}"
        )
    lines += [
        f"WARNING: the {side} measured uncommitted changes on top of {sha[:12]}: its numbers are not that commit's"
        for side, sha in report.dirty_sides()
    ]
    lines += [f"note: {n}" for n in report.notes]
    under = sum(tier(c.verdict, c.low, c.high) in UNDER for c in report.cases)
    lines.append(
        f"{len(report.regressions)} regressions, {len(report.improvements)} improvements, "
        f"{under} sure changes under the min effect, "
        f"{len(report.correctness_failures)} correctness failures, {len(report.failed)} not measured"
    )
    return "\n".join(lines)
