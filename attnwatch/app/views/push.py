"""This push: the newest main run of every GPU against the run before it, in one view —
correctness failures first (as the PR comment), then regressions grouped by cause (one kernel
variant slower on every shape and GPU is one line, with the count and the range of the change,
its cases one click away), cases that stopped running, improvements. A re-measurement of the
same commit is said to be one: its differences are noise, never changes.

Every line fits a 1440 px wide window: the per-case details are markdown tables, which wrap,
not one-line links or canvas grids, which cut their text at the edge."""

import pandas as pd
import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.data import push, quality, runs, timers
from attnwatch.history.analysis.ncu_explain import CAUSE_CHARS
from attnwatch.history.links import alert_query, page_by_key

NBSP = "\u00a0"  # keeps an interval on one line when the table wraps
# Case rows drawn per cause, the largest sure change first; the rest are in the section's table.
# Each row is markdown the browser renders on the first view: on the 1M-result history's first
# page (one cause of 48 cases) 20 rows instead of 60 took 0.1 s off every load (docs/benchmarks/dashboard.md,
# "The first page warmed before its first visitor").
MAX_ROWS = 20
EXPANDED_CAUSES = 3  # causes opened at first in a section


def change_columns(rows: pd.DataFrame, question: str = "real?") -> dict:
    """The change table's columns, those a reader needs first (GPU, case, verdict, correctness,
    change, interval, before and after) sized to their headers and cells (app.table_layout), so
    that at 1440x900 they are on screen whole; the rest follow. The timers come from what each
    run stored (app.data.timers), so a CPU wall clock is never labelled as CUDA events."""
    fit, numbers = table_layout.fit, table_layout.number_texts
    before = f"before µs ({timers.timer_tag(rows.get('base_timing_mode', ()))})"
    after = f"after µs ({timers.timer_tag(rows.get('head_timing_mode', ()))})"
    return {
        "gpu": st.column_config.TextColumn("GPU", width=fit("GPU", rows["gpu"])),
        "host": st.column_config.TextColumn(
            "host", help="the pool (host) where the GPU model ran on several", width=fit("host", rows["host"])
        ),
        "case_id": st.column_config.TextColumn("case", width=fit("case", rows["case_id"], most=420)),
        "verdict": st.column_config.TextColumn("verdict", width=fit("verdict", rows["verdict"])),
        "correctness": st.column_config.TextColumn("correctness", width=fit("correctness", rows["correctness"])),
        "delta_pct": st.column_config.NumberColumn(
            "Δ %", format="%+.1f", width=fit("Δ %", numbers(rows["delta_pct"], 1, True))
        ),
        "ratio_low": st.column_config.NumberColumn(
            "low",
            format="%.4f",
            help="the head/base interval's low end",
            width=fit("low", numbers(rows["ratio_low"], 4)),
        ),
        "ratio_high": st.column_config.NumberColumn(
            "high",
            format="%.4f",
            help="the head/base interval's high end",
            width=fit("high", numbers(rows["ratio_high"], 4)),
        ),
        "base_us": st.column_config.NumberColumn(before, format="%.2f", width=fit(before, numbers(rows["base_us"], 2))),
        "head_us": st.column_config.NumberColumn(after, format="%.2f", width=fit(after, numbers(rows["head_us"], 2))),
        "head_graph_median_us": st.column_config.NumberColumn(
            "after µs (graph replay)",
            format="%.2f",
            help="CUDA-graph replay median: launch gaps removed (cases under the graph threshold only)",
        ),
        "real": st.column_config.TextColumn(question, help="is the change real: the answer from the stored evidence"),
        "head_marks": st.column_config.TextColumn("after: marks"),
        "base_marks": st.column_config.TextColumn("before: marks"),
        "plot": st.column_config.LinkColumn("plot", display_text="open trend"),
    }


ORDER = [
    "gpu",
    "host",
    "case_id",
    "verdict",
    "correctness",
    "delta_pct",
    "ratio_low",
    "ratio_high",
    "base_us",
    "head_us",
    "head_graph_median_us",
    "real",
    "base_marks",
    "head_marks",
    "plot",
]


def _pct(value) -> str:
    return "—" if pd.isna(value) else f"{(value - 1) * 100:+.1f}%"


def where(row) -> str:
    """The GPU, and the host where its model ran on several (each host is its own series)."""
    return f"**{ui.md(row.gpu)}**" + (f" (host {ui.code_span(row.host)})" if row.host else "")


def _run_commit(run_id, sha) -> str:
    return f"run {ui.code_span(run_id)} (commit {ui.code_span(ui.short_sha(sha))})"


def gpu_summary(pairs, changes) -> None:
    """One line per GPU: which runs are compared and what the push changed there. A GPU with
    nothing to compare lists no counts: '0 regressions' there would claim a comparison."""
    for pair in pairs.itertuples():
        rows = (
            changes[(changes["gpu"] == pair.gpu) & (changes["host"].fillna("") == (pair.host or ""))]
            if not changes.empty
            else changes
        )
        counts = rows["section"].value_counts() if not rows.empty else {}
        status = "" if pair.status == "complete" else f" · run status **{ui.md(pair.status)}**"
        head = f"{where(pair)}: {_run_commit(pair.run_id, pair.commit_sha)}"
        if not pair.base_run:
            st.markdown(f"{head}{status} is its first main run: nothing to compare it with yet.")
            continue
        correctness = (
            f"{int(counts.get('correctness', 0))} correctness failure(s)"
            if pair.correctness_checked
            else "correctness **not run**"
        )
        lost = f"{int(counts.get('not measured', 0))} not measured"
        if pair.same_commit:
            st.markdown(
                f"{head}{status} re-measured the commit of run {ui.code_span(pair.base_run)}: "
                f"**same commit, an A/A repeat: its differences are noise, not changes** "
                f"({int(counts.get('repeat', 0))} beyond min_effect) · {correctness} · {lost}"
            )
            continue
        st.markdown(
            f"{head} vs {_run_commit(pair.base_run, pair.base_commit)}{status} · "
            f"{int(counts.get('regression', 0))} regression(s) · {correctness} · {lost} · "
            f"{int(counts.get('improvement', 0))} improvement(s)"
        )


def _case_link(row) -> str:
    """The case without its variant (the cause names it), linked to its trend around the push."""
    parts = str(row.case_id).split("/")
    text = ui.md(" ".join(parts[1:]) if len(parts) == 4 else row.case_id)
    return f"[{text}]({row.plot})" if row.plot else text


def cause_table(rows: pd.DataFrame, question: str) -> str:
    """A cause's cases as a markdown table: wraps to the width, links each case to its trend."""
    show_host = rows["host"].notna().any()
    show_graph = rows["head_graph_median_us"].notna().any()
    header = [
        "GPU",
        *(["host"] if show_host else []),
        "case",
        "Δ",
        "interval",
        "before → after (µs)",
        *(["after, graph replay (µs)"] if show_graph else []),
        question,
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows.head(MAX_ROWS).itertuples():
        interval = "—" if pd.isna(row.ratio_low) else f"[{_pct(row.ratio_low)},{NBSP}{_pct(row.ratio_high)}]"
        cells = [
            ui.md(row.gpu),
            *([ui.md(row.host or "")] if show_host else []),
            _case_link(row),
            f"**{_pct(row.ratio)}**",
            interval,
            f"{ui.plain_number(row.base_us)} → {ui.plain_number(row.head_us)}",
            *([ui.plain_number(row.head_graph_median_us)] if show_graph else []),
            ui.md(row.real or "—"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cause_label(cause, question: str) -> str:
    """One line per cause: the variant, how many cases on which GPUs, the range of the change,
    and how the cases answered the section's question."""
    gpus = ", ".join(cause.gpus)
    span = (
        f"{cause.low_pct:+.1f}%"
        if abs(cause.high_pct - cause.low_pct) < 0.05
        else f"{cause.low_pct:+.1f}% to {cause.high_pct:+.1f}%"
    )
    return (
        f"**{ui.md(cause.variant)}** · {cause.cases} case(s) on {ui.md(gpus)} · {span} · "
        f"{question} {ui.md(cause.real or '—')}"
    )


def cause_line(evidence: push.CauseEvidence | None) -> str:
    """Why the cause moved, from what the history holds (push.cause_evidence), one line each:
    the pushed commit and its message, the build report before → after, the counter rules' cause."""
    if evidence is None:
        return ""
    lines = [
        f"**Commit** {ui.code_span(ui.short_sha(sha))}: {ui.md(ui.truncate(message, 160)) or '(no message stored)'}"
        for sha, message in evidence.commits
    ]
    lines.append(
        f"**Build** (ptxas, before → after): {ui.md(evidence.build)}"
        if evidence.build
        else "**Build**: no build report with ptxas figures on both sides (library and Triton kernels store none)"
    )
    if evidence.counter_cause:
        case = " ".join((evidence.counter_case or "").split("/")[1:])
        others = f"; {evidence.profiled} of {evidence.cases} cases profiled" if evidence.cases > 1 else ""
        lines.append(
            f"**ncu cause** ({ui.md(case)}{others}): {ui.md(ui.truncate(evidence.counter_cause, CAUSE_CHARS))}"
        )
    else:
        lines.append("**ncu cause**: none: no case of this cause was profiled in this run and an earlier one")
    return "  \n".join(lines)


def changes_by_cause(rows: pd.DataFrame, name: str, key: str, evidence: dict) -> None:
    """A change section: one expander per cause (the first few open), each with why it moved
    (cause_line) and its cases, then every line in a table."""
    question = push.QUESTION[name]
    causes = push.causes(rows)
    st.caption(
        f"{len(rows)} case(s) from {len(causes)} cause(s), one per kernel variant; the largest sure "
        "change first. Each case opens its trend around the push (in a new tab)."
    )
    for i, cause in enumerate(causes.itertuples()):
        with st.expander(cause_label(cause, question), expanded=i < EXPANDED_CAUSES):
            why = cause_line(evidence.get((name, cause.variant)))
            if why:
                st.markdown(why)
            st.markdown(cause_table(cause.rows, question))
            if cause.cases > MAX_ROWS:
                st.caption(f"{cause.cases - MAX_ROWS} more: turn on the table below.")
    table(rows, key, question)


# Tables are drawn on request: a data grid is the one part of the page that makes the browser
# load and compile the grid's code, which the first view after a start pays in full.
TABLE_HELP = "every column, sortable and downloadable"
CAPTIONS = {
    "no interval": "These runs stored no raw samples, so there is no interval and no verdict: only the ratio "
    "of medians."
}


def change_section(changes, name: str, title: str, key: str, when_empty=None, evidence=None) -> pd.DataFrame:
    """A change section's heading and its causes; an empty section shows `when_empty`, or
    nothing at all when that is None. Returns the section's rows."""
    rows = push.section(changes, name)
    if rows.empty and when_empty is None:
        return rows
    st.subheader(f"{title} ({len(rows)})")
    if name in CAPTIONS:
        st.caption(CAPTIONS[name])
    if rows.empty:
        when_empty()
    else:
        changes_by_cause(rows, name, key, evidence or {})
    return rows


def table(rows, key: str, question: str = "real?") -> None:
    if st.toggle(f"Table ({len(rows)} rows)", key=f"{key}_table", help=TABLE_HELP):
        ui.table(
            rows[_columns(rows)],
            hide_index=True,
            column_config=change_columns(rows, question),
            width="stretch",
            key=key,
        )


def _columns(frame: pd.DataFrame) -> list[str]:
    """ORDER, without the host column where no GPU model ran on several hosts."""
    return [c for c in ORDER if c != "host" or frame["host"].notna().any()]


def correctness_links(rows) -> None:
    for row in rows.itertuples():
        err = "" if pd.isna(row.head_max_abs_err) else f" · max abs err {row.head_max_abs_err:.3g}"
        st.page_link(
            "views/run.py",
            query_params={"run": row.head_run},
            icon=":material/error:",
            label=f"{where(row)} · {ui.code_span(row.case_id)} · correctness **{ui.md(row.correctness)}**{err}",
        )


def not_measured_links(rows) -> None:
    for row in rows.itertuples():
        st.page_link(
            "views/run.py",
            query_params={"run": row.head_run},
            icon=":material/warning:",
            label=f"{where(row)} · {ui.code_span(row.case_id)} · {ui.md(row.verdict)}",
        )


def nothing_to_compare(source, pairs, main: str) -> None:
    """The empty first page, honestly: why nothing is compared and what makes it show a push."""
    if pairs.empty:
        elsewhere = push.other_branches(source)
        text = f"No run on the default branch {ui.code_span(main)} yet: this page compares its newest runs."
        if not elsewhere.empty:
            named = ", ".join(f"{ui.code_span(b)} ({n} runs)" for b, n in zip(elsewhere["branch"], elsewhere["runs"]))
            first = elsewhere["branch"].iloc[0]
            text += (
                f" This history has runs on {named}. If {ui.code_span(first)} is the repository's default "
                "branch, record it once (the GPU workflow passes it to `attnwatch ingest --default-branch`):"
            )
        st.info(text)
        if not elsewhere.empty:
            st.code(f"attnwatch history default-branch {first}", language=None)
        return
    st.info(
        "Every GPU has one main run so far, so there is no push to show yet: this page compares a GPU's "
        "newest main run with the one before it. Measure and ingest the next commit on the same GPU "
        "(`attnwatch run --ingest`) and its changes appear here; until then Overview and Run show what "
        "the first run measured."
    )
    for page in map(page_by_key, ("overview", "run")):
        st.page_link(page.script, label=page.title, icon=":material/arrow_forward:")


def push_page(source, shape):
    pairs = push.newest_main_runs(source)
    changes = push.push_changes(source)
    main = pairs["main_branch"].iloc[0] if not pairs.empty else runs.default_branch(source)
    st.caption(
        f"The newest run on {ui.code_span(main)} (the default branch) of every GPU against the run before it. "
        "Verdicts as on Compare: the head/base interval from both runs' samples against the GPU's min_effect "
        "(history/analysis/thresholds.toml)."
    )
    gpu_summary(pairs, changes)
    for pair in pairs.itertuples():
        if pair.base_run:
            moved = push.what_moved(source, pair.base_run, pair.run_id)
            if moved:
                st.caption(f"What moved on {where(pair)} between the two runs: {ui.md(moved)}")
        if not pair.correctness_checked and pair.base_run:
            st.info(
                f"Correctness was not checked in run {ui.md(pair.run_id)} on {ui.md(pair.gpu)}: "
                "its cases read 'not run', never '0 failures'."
            )
        if pair.status != "complete":
            st.warning(
                f"The newest main run on {ui.md(pair.gpu)} ({ui.md(pair.run_id)}) ended '{ui.md(pair.status)}': "
                "only what it measured is compared."
            )
    if changes.empty:
        nothing_to_compare(source, pairs, main)
        return

    failures = push.section(changes, "correctness")
    st.subheader(f"Correctness failures ({len(failures)})")
    if failures.empty:
        checked = pairs["correctness_checked"].any()
        (st.success if checked else st.info)(
            "No correctness failure." if checked else "Correctness was not run on any GPU."
        )
    else:
        correctness_links(failures)

    evidence = push.cause_evidence(source)
    regressions = change_section(
        changes,
        "regression",
        "Regressions",
        "push_regressions",
        lambda: st.success("No case is slower beyond its GPU's min_effect with confidence."),
        evidence,
    )

    lost = push.section(changes, "not measured")
    if not lost.empty:
        st.subheader(f"Cases that stopped producing a number ({len(lost)})")
        not_measured_links(lost)

    improvements = change_section(
        changes, "improvement", "Improvements", "push_improvements", lambda: st.caption("None."), evidence
    )
    unverified = change_section(
        changes, "no interval", "Moved, without samples for an interval", "push_unverified", evidence=evidence
    )

    repeats = push.section(changes, "repeat")
    if not repeats.empty:
        st.subheader(f"Same commit re-measured: noise, not changes ({len(repeats)})")
        st.caption(
            "The newest run measured the same commit as the run before it (an A/A repeat). Nothing changed "
            "in the code, so these differences beyond min_effect are run-to-run noise: none is a regression "
            "or an improvement. They show how far two runs of one commit can differ on this GPU."
        )
        table(repeats, "push_repeats")

    notes = push.quality_caption([regressions, improvements, unverified])
    st.caption(" ".join(["Marks:", *notes, quality.BASIS]) if notes else quality.BASIS)
    if st.toggle(f"Every case of the push ({len(changes)})", key="push_all_table", help=TABLE_HELP):
        ui.table(
            changes[_columns(changes)],
            hide_index=True,
            column_config=change_columns(changes),
            width="stretch",
            key="push_all",
        )
    st.page_link(
        "views/alerts.py",
        label="Alerts detection recorded, grouped by the commit that caused them",
        icon=":material/notifications:",
        query_params=alert_query(),
    )


ui.run_page("push", push_page)
