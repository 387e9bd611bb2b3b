"""Markdown for the sticky PR comment and the job summary, from a validated CompareReport.

Layout (docs/design.md "PR comments and workflows"): a hidden marker, a one-line verdict,
correctness failures first, a table of significant changes (base, head, Δ%, interval,
gap to its operator's baseline), for each changed case profiled on both sides the counter rules' cause and ranked
rules (history/analysis/ncu_explain.py), the full table folded in <details>, links to
the run and the dashboard. With a dashboard URL, each significant change links to its Trends
view (the case on the GPU, the merge base..head range marked) and the footer to the Compare view
of the two commits, in the dashboard's URL contract (history.links). Every value that came from
the artifact is escaped (ci.integration.comment.escape); numbers are formatted here. GitHub refuses comment
bodies over 65,536 characters: the folded table is cut first, then the significant-changes
table, each with a note saying how many rows were left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnwatch.ci.integration.comment.escape import md_code, md_text, safe_url
from attnwatch.ci.integration.comment.selection import selection_lines
from attnwatch.ci.compare.report import NO_RUN_NOISE, CaseComparison, CompareReport
from attnwatch.history import links as dashboard, reproduce
from attnwatch.history.analysis.caps import cap_mark
from attnwatch.history.analysis.ceilings import achieved_bandwidth
from attnwatch.history.analysis.kernel_config import change_text
from attnwatch.history.analysis.ncu_explain import CAUSE_CHARS
from attnwatch.history.analysis.tiers import SLOWER_UNDER, UNDER, label, percent, tier

MARKER = "<!-- attnwatch:compare -->"
GITHUB_BODY_LIMIT = 65536
BODY_BUDGET = GITHUB_BODY_LIMIT - 1536  # headroom for the truncation notes and links
SECTION_BUDGET = 12000  # correctness failures and unmeasured cases: each table at most this long


@dataclass(frozen=True)
class Links:
    """Where the comment links to. `dashboard_url`: the footer's dashboard link (the root, or a page
    already chosen for this PR); `dashboard_root`: the dashboard's root, from which each change's
    Trends link is built (defaults to `dashboard_url`, taken as the root)."""

    run_url: str | None = None
    dashboard_url: str | None = None
    dashboard_root: str | None = None


def _us(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"


def _pct(ratio: float | None) -> str:
    return "—" if ratio is None else f"{(ratio - 1.0) * 100.0:+.1f}%"


def _side_us(c: CaseComparison, side: str, gpu: str) -> str:
    """A side's median; for a memory-bound case also its achieved bandwidth and the share of the
    GPU's measured DRAM copy bandwidth (history/analysis/ceilings.toml), e.g. "41.2 · 3,260 GB/s, 77%"."""
    median = getattr(c, side).median_us
    text = _us(median)
    if c.bound != "memory" or not c.bytes or median is None:
        return text
    gbps, share = achieved_bandwidth(c.bytes, median, gpu, c.dtype)
    return f"{text} · {gbps:,.0f} GB/s" + (f", {share:.0%}" if share is not None else "")


def _bandwidth_note(cases: list[CaseComparison], gpu: str) -> list[str]:
    """What the bandwidth after a memory-bound case's median means, when one is shown."""
    if not any(c.bound == "memory" and c.bytes for c in cases):
        return []
    return [
        f"_Memory-bound cases: µs · achieved GB/s (the operator's byte model / the median), % of {md_text(gpu)}'s "
        "measured DRAM copy bandwidth (history/analysis/ceilings.toml; none where it was never measured)._",
        "",
    ]


def _interval(case: CaseComparison) -> str:
    if case.low is None or case.high is None:
        return "—"
    return f"[{(case.low - 1) * 100:+.1f}%, {(case.high - 1) * 100:+.1f}%]"


def _gap(case: CaseComparison) -> str:
    """The gap to the operator's baseline on each side, naming the baseline (the head's)."""
    b, h = case.base.gap_to_baseline, case.head.gap_to_baseline
    if b is None and h is None:
        return "—"
    fmt = lambda g: "—" if g is None else f"{g:.3f}×"  # noqa: E731
    baseline = case.head.baseline_variant or case.base.baseline_variant
    return f"{fmt(b)} → {fmt(h)}" + (f" (vs {baseline})" if baseline else "")


_VERDICT_MARK = {
    "regression": "🔴 slower",
    "improvement": "🟢 faster",
    "no change": "no change",
    "failed": "⚠️ failed",
    "new": "new (no base)",
    "removed": "removed",
    "skipped": "skipped",
}
_UNDER_MARK = {SLOWER_UNDER: "🟡 ", UNDER[1]: "🔵 "}


def _case_tier(c: CaseComparison) -> str:
    return tier(c.verdict, c.low, c.high)


def _mark(c: CaseComparison, min_effect: float) -> str:
    """The verdict cell: a sure change under min_effect (the case's own where case rules give
    one) reads 'slower, under the 2% threshold' (history.analysis.tiers), never 'no change';
    an ignored case says so."""
    t = _case_tier(c)
    mark = _UNDER_MARK[t] + label(t, c.effect(min_effect)) if t in UNDER else _VERDICT_MARK[c.verdict]
    return mark + (" (ignored)" if c.ignored else "")


def under_threshold(report: CompareReport) -> list[CaseComparison]:
    """Cases whose interval excludes 1 by less than min_effect: real, but under the threshold."""
    return [c for c in report.cases if _case_tier(c) in UNDER and not c.ignored]


def _count(n: int, noun: str, rest: str = "") -> str:
    """'1 regression', '2 regressions', '3 cases not measured'."""
    return f"{n} {noun}{'s' * (n != 1)}{rest}"


def headline(report: CompareReport) -> str:
    """The one-line verdict."""
    counted = (
        (report.correctness_failures, "correctness failure", ""),
        (report.regressions, "regression", ""),
        (report.failed, "case", " not measured"),
        (report.improvements, "improvement", ""),
        (report.ignored, "ignored case", ""),
    )
    parts = [_count(len(cases), noun, rest) for cases, noun, rest in counted if cases]
    if not report.cases:
        return "### ⚠️ attnwatch: no cases were compared"
    bad = report.should_fail()
    icon = "❌" if bad else "✅"
    under = [_case_tier(c) for c in under_threshold(report)]
    if not parts:
        parts.append(
            f"no change of ±{percent(report.min_effect)} or more in {len(report.cases)} cases"
            if under
            else f"no significant change in {len(report.cases)} cases"
        )
    for t in UNDER:  # sure, but under the threshold: said, never counted as 'no change'
        if under.count(t):
            parts.append(f"{under.count(t)} {label(t, report.min_effect)}")
    return f"### {icon} attnwatch: " + ", ".join(parts)


INTERVAL_NAMES = {
    "rounds-t": "paired-t (over rounds)",
    "hierarchical": "two-level bootstrap (rounds, samples)",
    "pooled": "pooled-sample bootstrap",
}


def _context_line(report: CompareReport) -> str:
    method = INTERVAL_NAMES.get(report.method, report.method)
    base = f"pinned {md_text(report.base_ref, 120)} at" if report.base_ref.startswith("baseline ") else "merge base"
    return (
        f"Head {md_code(report.head_sha[:12])} vs {base} {md_code(report.merge_base_sha[:12])} "
        f"on {md_text(report.gpu_name)}, same job, up to {_count(report.rounds, 'interleaved round')} per side; {report.confidence:.0%} {method} interval of "
        f"head/base median; flagged when the interval excludes 1 and the median moved by at least ±{report.min_effect:.1%}."
    )


_WARNINGS = {NO_RUN_NOISE: f"**The {NO_RUN_NOISE}**", "crash of unknown origin": "**A crash of unknown origin**"}


def _note_line(note: str) -> str:
    """One note as a quoted line; the known warnings get a fixed, bold lead (the rest escaped)."""
    for lead, shown in _WARNINGS.items():
        if note.startswith(lead):
            return f"> ⚠️ {shown}{md_text(note[len(lead) :], 400)}"
    return f"> {md_text(note, 400)}"


def _dirty_lines(report: CompareReport) -> list[str]:
    """A warning per side that measured uncommitted changes (compare.json's base_dirty, head_dirty)."""
    lines = [
        f"> ⚠️ **The {side} measured uncommitted changes** on top of {md_code(sha[:12])}: its numbers are not "
        "that commit's"
        for side, sha in report.dirty_sides()
    ]
    return lines + [""] if lines else []


def _notes(report: CompareReport) -> list[str]:
    """The report's notes, warnings first, each a quoted line; at most 10, each cut to 400
    characters (the notes come from the artifact: escaped like every other value)."""
    if not report.notes:
        return []
    ordered = sorted(report.notes, key=lambda n: not any(n.startswith(lead) for lead in _WARNINGS))
    lines = [_note_line(n) for n in ordered[:10]]
    if len(report.notes) > 10:
        lines.append(f"> … {len(report.notes) - 10} more notes in compare.json")
    return lines + [""]


def _correctness_section(report: CompareReport) -> list[str]:
    rows = report.correctness_failures
    if not rows:
        return []
    lines = [
        "#### Correctness failures",
        "",
        "| case | max abs err | rel err | base passed | error | measure again |",
        "|---|---:|---:|:-:|---|---|",
    ]
    body = []
    for c in rows:
        h = c.head
        err = lambda v: "—" if v is None else f"{v:.3g}"  # noqa: E731
        base_ok = {True: "yes", False: "no", None: "—"}[c.base.correct]
        body.append(
            f"| {md_code(c.case_id)} | {err(h.max_abs_err)} | {err(h.rel_err)} | {base_ok} | {md_text(h.error or '', 300)} "
            f"| {_reproduce(c, report)} |"
        )
    return lines + _table(body, SECTION_BUDGET, "correctness failures")[0] + [""]


def _config_section(report: CompareReport) -> list[str]:
    """Cases whose kernel ran another launch configuration on the head than on the base (an
    autotuner's pick, not the PR's code), and sides whose configuration differed between rounds:
    said apart from the verdict, which does not tell a code change from a configuration change."""
    rows = []
    for c in sorted(report.cases, key=lambda c: c.case_id):
        if c.config_change:
            base, head = c.config_change
            rows.append(
                f"- {md_code(c.case_id)} ({_mark(c, report.min_effect)}): {change_text(md_code(base), md_code(head))} "
                "on the head; the difference may be the configuration, not the code"
            )
        for side_name, side in (("base", c.base), ("head", c.head)):
            if len(side.kernel_configs) > 1:
                rows.append(
                    f"- {md_code(c.case_id)}: the {side_name} ran "
                    f"{', '.join(md_code(k) for k in side.kernel_configs[:10])} in different rounds "
                    "(tuned in the process)"
                )
    if not rows:
        return []
    return ["#### Kernel configuration changes", "", *_table(rows, SECTION_BUDGET, "configuration changes")[0], ""]


def _reproduce(c: CaseComparison, report: CompareReport) -> str:
    """The command that A/Bs this case again (history.reproduce), as a code span."""
    command = reproduce.compare_command(
        c.case_id,
        report.merge_base_sha,
        report.head_sha,
        method=report.method,
        rounds=report.rounds,
        dirty=report.base_dirty or report.head_dirty,
    )
    return md_code(command, 400) if command else "—"


def cap_note(c: CaseComparison) -> str:
    """A warning after the case id, e.g. " ⚠ power cap (head)", when a side was measured under a power or thermal cap
    (history.analysis.caps, from the clocks-event reasons its rounds reported); "" otherwise."""
    marks = {side: cap_mark(getattr(c, side).throttle_reasons) for side in ("base", "head")}
    if not any(marks.values()):
        return ""
    if marks["base"] == marks["head"]:
        return f" ⚠ {marks['base']} (both)"
    return "".join(f" ⚠ {m} ({side})" for side, m in marks.items() if m)


def _change_row(c: CaseComparison, report: CompareReport, plot_url: str | None = None, linked: bool = False) -> str:
    """One case's row, ending with the command that measures it again; with `linked`, a last
    cell linking to its trend on the dashboard. A side measured under a cap is marked after
    the case id."""
    row = (
        f"| {md_code(c.case_id)}{cap_note(c)} | {_mark(c, report.min_effect)} | {_side_us(c, 'base', report.gpu_name)} | "
        f"{_side_us(c, 'head', report.gpu_name)} | "
        f"{_pct(c.ratio)} | {_interval(c)} | {_gap(c)} | {_reproduce(c, report)} |"
    )
    return row + ((f" [trend]({plot_url}) |" if plot_url else " — |") if linked else "")


_CHANGE_HEADER = [
    "| case | verdict | base µs | head µs | Δ | interval | gap to baseline base → head | measure again |",
    "|---|---|---:|---:|---:|---|---|---|",
]
_LINKED_HEADER = [_CHANGE_HEADER[0] + " plot |", _CHANGE_HEADER[1] + "---|"]


def _commits(report: CompareReport) -> str:
    return dashboard.commit_range(report.merge_base_sha, report.head_sha)


def _trend_url(report: CompareReport, case: CaseComparison, dash_url: str | None) -> str | None:
    """The dashboard's Trends view of this case on this GPU with the merge base..head range marked
    (history.links: the dashboard's own URL contract); None without a dashboard URL. The GPU is
    the series key's (history.contract.series_key.series_gpu, as compare wrote it); no host is named: a
    pull request is measured on its own runner, outside main's pools, so every pool of that GPU
    is drawn, each its own series."""
    if not dash_url:
        return None
    query = dashboard.case_trend_query(report.gpu_name, case.case_id, commits=_commits(report))
    return safe_url(dashboard.url(dash_url, "trends", query)) if query else None


def _failed_section(report: CompareReport) -> list[str]:
    if not report.failed:
        return []
    lines = ["#### Cases not measured", "", "| case | base | head | error | measure again |", "|---|---|---|---|---|"]
    body = []
    for c in report.failed:
        err = c.head.error or c.base.error or ""
        body.append(
            f"| {md_code(c.case_id)} | {md_text(c.base.status)} | {md_text(c.head.status)} | {md_text(err, 300)} "
            f"| {_reproduce(c, report)} |"
        )
    return lines + _table(body, SECTION_BUDGET, "unmeasured cases")[0] + [""]


RULES_SHOWN = 5  # ranked counter rules per case in the comment; compare.json has them all


def _ncu_section(report: CompareReport) -> list[str]:
    """Per decided case (regressions, improvements and sure changes under the threshold): the
    cause as one line (exact facts first, then the top counter rule beyond its noise with the
    time it accounts for), then the ranked rules; the plain metric deltas where no rule table
    was read."""
    changed = [c for c in report.cases if c.verdict in ("regression", "improvement") or _case_tier(c) in UNDER]
    cases = [c for c in changed if c.explanation or (c.ncu and c.verdict == "regression")]
    if not cases:
        return []
    lines = ["#### ncu: why the changed cases moved", ""]
    for c in cases:
        word = {"regression": "slower", "improvement": "faster"}.get(c.verdict) or label(
            _case_tier(c), c.effect(report.min_effect)
        )
        if c.explanation:
            lines += [f"{md_code(c.case_id)} {md_text(word)}: **{md_text(c.explanation.cause, CAUSE_CHARS)}**", ""]
            if c.explanation.changes:
                lines += ["| rule | base | head | Δ | noise band | accounts for |", "|---|---:|---:|---:|---:|---:|"]
                for r in c.explanation.changes[:RULES_SHOWN]:
                    band = f"±{r.band:.1%}" if r.band is not None else "none measured"
                    accounts = f"{abs(r.accounts_us):.3g} µs" if r.accounts_us is not None else "—"
                    lines.append(
                        f"| {md_text(r.title, 120)} | {r.base:.4g} | {r.head:.4g} | {r.change:+.1%} "
                        f"| {band} | {accounts} |"
                    )
                lines.append("")
            continue
        lines += [f"{md_code(c.case_id)}", "", "| metric | base | head | Δ |", "|---|---:|---:|---:|"]
        for d in c.ncu:
            delta = f"{(d.head / d.base - 1) * 100:+.1f}%" if d.base else "—"
            lines.append(f"| {md_code(d.metric)} | {d.base:.4g} | {d.head:.4g} | {delta} |")
        lines.append("")
    missing = len(changed) - len([c for c in changed if c.explanation])
    if missing:
        lines += [
            f"{missing} changed case(s) were not profiled on both sides (ncu absent, failed, or past its time bound).",
            "",
        ]
    return lines


def _under_section(report: CompareReport, budget: int) -> list[str]:
    """Sure changes under min_effect (history.analysis.tiers): listed apart, slower first, with
    what they mean; they fail nothing."""
    under = sorted(under_threshold(report), key=lambda c: (_case_tier(c) != SLOWER_UNDER, -abs((c.ratio or 1.0) - 1.0)))
    if not under:
        return []
    rows, _ = _table([_change_row(c, report) for c in under], max(budget, 1000), "changes under the threshold")
    return [
        f"#### Sure changes under the ±{percent(report.min_effect)} threshold",
        "",
        f"The interval excludes no change, but the median moved by less than {percent(report.min_effect)}: real "
        "on this job's worker processes, too small to fail the check (a process keeps an offset of up to about "
        "±1% for its life, docs/benchmarks.md).",
        "",
        *_CHANGE_HEADER,
        *rows,
        "",
    ]


def _ignored_section(report: CompareReport) -> list[str]:
    """Cases an ignore rule of history/analysis/case_rules.toml covers: measured and shown, failing nothing."""
    rows = [
        f"- {md_code(c.case_id)}: {_VERDICT_MARK[c.verdict]}, {md_text(c.ignored or '', 600)}" for c in report.ignored
    ]
    if not rows:
        return []
    return [
        "#### Ignored cases (history/analysis/case_rules.toml)",
        "",
        *_table(rows, SECTION_BUDGET, "ignored cases")[0],
        "",
    ]


def _table(rows: list[str], budget: int, what: str) -> tuple[list[str], int]:
    """Keep as many rows as fit in `budget` characters; return (rows, how many were left out)."""
    kept: list[str] = []
    used = 0
    for i, row in enumerate(rows):
        if used + len(row) + 1 > budget:
            return kept + [
                f"| … {len(rows) - i} more {what} left out to fit GitHub's comment limit; all are in compare.json |"
            ], len(rows) - i
        kept.append(row)
        used += len(row) + 1
    return kept, 0


def render_comment(report: CompareReport, links: Links = Links()) -> str:
    """The whole comment body (marker first), under GitHub's 65,536-character limit."""
    significant = sorted(
        (c for c in report.cases if c.verdict in ("regression", "improvement") and not c.ignored),
        key=lambda c: (c.verdict != "regression", -abs((c.ratio or 1.0) - 1.0)),
    )
    head = [MARKER, headline(report), "", _context_line(report), ""]
    head += _dirty_lines(report)
    head += _notes(report)
    head += selection_lines(report)
    head += _correctness_section(report)
    head += _failed_section(report)
    head += _config_section(report)
    head += _ignored_section(report)
    tail = []
    run_url, dash_url = safe_url(links.run_url), safe_url(links.dashboard_url)
    root = safe_url(links.dashboard_root or links.dashboard_url)
    link_parts = []
    if run_url:
        link_parts.append(f"[workflow run]({run_url})")
    if dash_url:
        link_parts.append(f"[dashboard]({dash_url})")
    if root and dash_url == root:  # no page chosen for this PR: the two commits on Compare
        compare_url = safe_url(
            dashboard.url(root, "compare", dashboard.compare_query(report.gpu_name, commits=_commits(report)))
        )
        if compare_url:
            link_parts.append(f"[these commits on the dashboard]({compare_url})")
    link_parts.append("full data: the `compare.json` artifact")
    tail.append(" · ".join(link_parts))

    fixed = "\n".join(head + tail)
    ncu = _ncu_section(report)
    budget = BODY_BUDGET - len(fixed)
    change_rows = [_change_row(c, report, _trend_url(report, c, root), linked=bool(root)) for c in significant]
    change_lines, _ = _table(change_rows, max(budget // 2, 2000), "significant changes")
    header = _LINKED_HEADER if root else _CHANGE_HEADER
    sig = (
        ["#### Significant changes", "", *_bandwidth_note(significant, report.gpu_name), *header, *change_lines, ""]
        if significant
        else [
            f"No case moved by ±{report.min_effect:.1%} or more beyond its {report.confidence:.0%} interval's noise.",
            "",
        ]
    )
    sig += _under_section(report, budget // 4)
    ncu_text = "\n".join(ncu)
    if len(ncu_text) > (budget - sum(len(s) + 1 for s in sig)) // 2:
        ncu = [
            "#### ncu",
            "",
            f"ncu explanations for {len([c for c in report.cases if c.explanation])} changed cases are in compare.json (too long for this comment).",
            "",
        ]
    budget -= sum(len(s) + 1 for s in sig) + sum(len(s) + 1 for s in ncu)
    all_rows = [_change_row(c, report) for c in sorted(report.cases, key=lambda c: c.case_id)]
    full, _ = _table(all_rows, max(budget - 400, 0), "cases")
    details = [
        "<details><summary>All " + str(len(report.cases)) + " cases</summary>",
        "",
        *_CHANGE_HEADER,
        *full,
        "",
        "</details>",
        "",
    ]
    return "\n".join(head + sig + ncu + details + tail) + "\n"


def render_short(report: CompareReport, links: Links = Links()) -> str:
    """A minimal body (verdict, counts, links): the fallback when GitHub refuses the full one."""
    lines = [
        MARKER,
        headline(report),
        "",
        _context_line(report),
        "",
        *_dirty_lines(report),
        *_notes(report),
        "The full comment was refused by GitHub (too long); every case is in the `compare.json` artifact.",
        "",
    ]
    run_url, dash_url = safe_url(links.run_url), safe_url(links.dashboard_url)
    if run_url:
        lines.append(f"[workflow run]({run_url})")
    if dash_url:
        lines.append(f"[dashboard]({dash_url})")
    return "\n".join(lines) + "\n"
