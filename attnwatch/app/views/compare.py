"""Compare: any two runs (or the newest runs of two commits) case by case — stored medians, the
change, an interval and verdict where both runs stored samples, correctness of both — sortable
and downloadable. Any run of the history can be reached by search; a run a link names is used
as named, or the page says it does not exist (never silently another run)."""

import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.data import compare, defaults, quality, runs, timers
from attnwatch.app.url_state import UrlState, url_text
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.links import parse_commit_range
from attnwatch.history.analysis import baselines, tiers
from attnwatch.history import reproduce
from attnwatch.history.contract.series_key import series_gpu

PICKER_RUNS = 100  # runs listed before searching; the search reaches every run
SKIPPED_IN_BOTH = "skipped in both"  # compare's status verdict of a case neither run could run


def delta_columns(table, base_timer: str, head_timer: str, timer_help: str, min_effect: float) -> dict:
    """The comparison table's columns in the order shown: the verdict, the case and the numbers
    that decide it, sized to their headers and cells (app.table_layout) so that at 1440x900 they
    are on screen whole; the rest follows. The timers come from what each run stored
    (app.data.timers), so a CPU or host wall clock is never labelled as CUDA events."""
    measured = f"timed by {timer_help}"
    fit, numbers = table_layout.fit, table_layout.number_texts
    base_label, head_label = f"base µs ({base_timer})", f"head µs ({head_timer})"
    decimals = table_layout.decimals_for(list(table["base_tflops"]) + list(table["head_tflops"]))
    return {
        "shown": st.column_config.TextColumn(
            "verdict",
            width=fit("verdict", table["shown"]),
            help=f"correctness first; '{compare.MOVED_NO_INTERVAL}': the stored medians differ by at least min_effect "
            f"({min_effect:.1%}) but a run stored no samples for an interval, so it is neither a regression nor "
            f"an improvement; '{tiers.label(tiers.SLOWER_UNDER, min_effect)}': the interval excludes no change, "
            "the median moved by less than min_effect",
        ),
        "variant": st.column_config.TextColumn("variant", width=fit("variant", table["variant"])),
        "shape_id": st.column_config.TextColumn("shape", width=fit("shape", table["shape_id"])),
        "dtype": st.column_config.TextColumn("dtype", width=fit("dtype", table["dtype"])),
        "causal": st.column_config.CheckboxColumn("causal", width=fit("causal", least=table_layout.CHECKBOX_PX)),
        "delta_pct": st.column_config.NumberColumn(
            "Δ %",
            format="%+.2f",
            width=fit("Δ %", numbers(table["delta_pct"], 2, True)),
            help="head median / base median − 1, in percent",
        ),
        "ratio_low": st.column_config.NumberColumn(
            "low",
            format="%.4f",
            width=fit("low", numbers(table["ratio_low"], 4)),
            help="the head/base interval's lower bound (a ratio; 1 is no change)",
        ),
        "ratio_high": st.column_config.NumberColumn(
            "high",
            format="%.4f",
            width=fit("high", numbers(table["ratio_high"], 4)),
            help="the head/base interval's upper bound (a ratio; 1 is no change)",
        ),
        "base_us": st.column_config.NumberColumn(
            base_label, format="%.2f", width=fit(base_label, numbers(table["base_us"], 2)), help=measured
        ),
        "head_us": st.column_config.NumberColumn(
            head_label, format="%.2f", width=fit(head_label, numbers(table["head_us"], 2)), help=measured
        ),
        "correctness": st.column_config.TextColumn(
            "correct (head)",
            width=fit("correct (head)", table["correctness"]),
            help="pass / FAIL / not run (never counted as a pass)",
        ),
        "head_marks": st.column_config.TextColumn("head: marks", width=140),
        "ratio": st.column_config.NumberColumn("head/base", format="%.4f"),
        "head_graph_median_us": st.column_config.NumberColumn("head µs (graph replay)", format="%.2f"),
        "base_marks": st.column_config.TextColumn("base: marks"),
        "base_gap": st.column_config.NumberColumn(
            "base gap to baseline",
            format="%.3f×",
            help=f"against the operator's baseline (column baseline_variant); {measured}",
        ),
        "head_gap": st.column_config.NumberColumn(
            "head gap to baseline",
            format="%.3f×",
            help=f"against the operator's baseline (column baseline_variant); {measured}",
        ),
        "base_tflops": st.column_config.NumberColumn(
            f"base TFLOPS ({base_timer})", format=f"%.{decimals}f", help=measured
        ),
        "head_tflops": st.column_config.NumberColumn(
            f"head TFLOPS ({head_timer})", format=f"%.{decimals}f", help=measured
        ),
        "base_status": st.column_config.TextColumn("base status"),
        "head_status": st.column_config.TextColumn("head status"),
        "verdict": st.column_config.TextColumn(
            "timing verdict", help="from the latency alone (interval, or ratio only)"
        ),
        "measure_again": st.column_config.TextColumn(
            "measure again",
            help="the command that A/Bs this case between the two runs' commits in one job (history.reproduce)",
        ),
        "case_id": st.column_config.TextColumn("case id"),
    }


def _labels(frame, key_column: str) -> dict[str, str]:
    """Run labels without the GPU (the page has picked it): what tells runs apart stays readable."""
    return {
        getattr(row, key_column): ui.run_label(row).replace(f" · {row.gpu} · ", " · ") for row in frame.itertuples()
    }


def drop_other_gpus(pinned, gpu: str):
    """The runs of `pinned` (named by the link or chosen before the GPU changed) that ran on `gpu`;
    the others are dropped with a note: runs of two GPUs are never compared, and a rule is one GPU's."""
    other = pinned[pinned["gpu"] != gpu]
    if not other.empty:
        named = ", ".join(f"{run.run_id} ({run.gpu})" for run in other.itertuples())
        st.warning(
            f"Dropped run(s) of another device: {ui.md(named)}. Runs are compared on one GPU only: "
            f"choose two runs on {ui.md(gpu)} below."
        )
    return pinned[pinned["gpu"] == gpu]


def pick_runs(source, gpu, url: UrlState):
    """Base and head run ids in 'runs' mode; None when a named run does not exist."""
    named = {side: url_text(side) for side in ("base", "head")}
    wanted = tuple(v for v in named.values() if v)
    search = st.text_input(
        "find a run (id, commit sha prefix, branch or PR number)",
        key="compare_search",
        max_chars=200,
        help=f"Without a search the newest {PICKER_RUNS} runs on this GPU are listed; the search reaches all of them.",
    )
    current = tuple(
        v for v in (st.session_state.get("compare_base_runs"), st.session_state.get("compare_head_runs")) if v
    )
    frame = runs.find_runs(source, search, gpu, PICKER_RUNS)
    pinned = runs.runs_by_id(source, tuple(dict.fromkeys(wanted + current)))
    missing = [v for v in wanted if v not in set(pinned["run_id"])]
    if missing:
        st.error(
            f"The link names run {ui.md(', '.join(missing))}, which is not in this history: nothing is compared "
            "(choose runs below, or check the link)."
        )
    pinned = drop_other_gpus(pinned, gpu)
    labels = {**_labels(pinned, "run_id"), **_labels(frame, "run_id")}
    ids = list(labels)
    if len(ids) < 2:
        st.info(f"{ui.md(gpu)} has {len(ids)} matching run(s): a comparison needs two.")
        return None, None
    head_default = (
        named["head"]
        if named["head"] in labels
        else compare.default_pair(frame, main_branch=runs.default_branch(source))[1] or ids[0]
    )
    base_default = runs.main_run_before(source, head_default) if head_default else None
    url.choice("compare_head_runs", "head", ids, head_default)
    url.choice("compare_base_runs", "base", ids, base_default if base_default in ids else ids[min(1, len(ids) - 1)])
    # One above the other, full width: side by side, a run's label was cut at 1440 px.
    base = st.selectbox("base", ids, format_func=lambda run_id: labels[run_id], key="compare_base_runs")
    head = st.selectbox("head", ids, format_func=lambda run_id: labels[run_id], key="compare_head_runs")
    if base_default and base_default not in ids and not named["base"]:
        st.caption("The main run before the head is not listed: search for it.")
    return (None, None) if missing else (base, head)


def pick_commits(source, gpu, url: UrlState):
    """Base and head run ids in 'commits' mode (each commit's newest run on `gpu`)."""
    url.text("compare_commits", "commits")
    text = st.text_input("commits (BASE..HEAD, full shas or prefixes)", key="compare_commits", max_chars=200)
    span = parse_commit_range(text)
    recent = runs.recent_runs(source, gpu, PICKER_RUNS).drop_duplicates("commit_sha")
    with st.expander("Commits with runs on this GPU (newest first)"):
        ui.table(
            recent[["commit_sha", "branch", "started_at", "commit_message", "run_id"]], hide_index=True, width="stretch"
        )
    if not span or not span.base or not span.head:
        st.info("Name two commits as BASE..HEAD (e.g. from the table above).")
        return None, None
    chosen = []
    for sha in (span.base, span.head):
        found = runs.newest_run_of_commit(source, sha, gpu)
        if found.empty:
            st.error(f"No run of commit {ui.md(sha)} on {ui.md(gpu)} in this history: nothing is compared.")
            return None, None
        chosen.append(found["run_id"].iloc[0])
    st.caption(f"Comparing run {ui.md(chosen[0])} (base) with run {ui.md(chosen[1])} (head).")
    return chosen[0], chosen[1]


def pick_baseline(source, gpu, url: UrlState):
    """Base and head run ids in 'pinned baseline' mode: the base is the baseline's pinned run, or
    its commit's newest run on `gpu` (history.analysis.baselines); the head any run, as in 'runs' mode."""
    pinned = {b.name: b for b in baselines.load_baselines()}
    url.choice("compare_baseline", "baseline", list(pinned), next(iter(pinned)))
    name = st.selectbox(
        "pinned baseline (history/analysis/baselines.toml)",
        list(pinned),
        key="compare_baseline",
        format_func=lambda n: pinned[n].describe(),
    )
    chosen = pinned[name]
    st.caption(f"{ui.md(chosen.name)}: {ui.md(chosen.reason)}")
    found = (
        runs.runs_by_id(source, (chosen.run,)) if chosen.run else runs.newest_run_of_commit(source, chosen.commit, gpu)
    )
    if chosen.run and not found.empty and str(found["gpu"].iloc[0]) != gpu:
        found = found.iloc[0:0]  # a pinned run of another GPU is no baseline for this one
    if found.empty:
        st.error(
            f"Baseline {ui.md(chosen.describe())} has no run on {ui.md(gpu)} in this history: nothing is compared."
        )
        return None, None
    base = str(found["run_id"].iloc[0])
    frame = runs.find_runs(source, "", gpu, PICKER_RUNS)
    named_head = drop_other_gpus(runs.runs_by_id(source, tuple(v for v in (url_text("head"),) if v)), gpu)
    labels = {**_labels(named_head, "run_id"), **_labels(frame, "run_id")}
    ids = [i for i in labels if i != base]
    if not ids:
        st.info(f"{ui.md(gpu)} has no other run to compare with the baseline.")
        return None, None
    url.choice("compare_head_runs", "head", ids, ids[0])
    head = st.selectbox("head", ids, format_func=lambda run_id: labels[run_id], key="compare_head_runs")
    st.caption(f"Comparing run {ui.md(head)} (head) with the baseline's run {ui.md(base)}.")
    return base, head


def compare_page(source, shape):
    url = UrlState()
    named_head = url_text("head") or url_text("base")
    header = runs.run_header(source, named_head) if named_head else None
    run_gpu = (
        None
        if header is None or header.empty
        else series_gpu(header["gpu_name"].iloc[0], header["device_kind"].iloc[0])
    )
    gpu = ui.gpu_picker(shape, key="compare_gpu", url=url, default=run_gpu or defaults.focus(source).gpu)
    modes = ["runs", "commits"] + (["pinned baseline"] if baselines.load_baselines() else [])
    linked = (
        "commits"
        if url_text("commits")
        else "pinned baseline"
        if url_text("baseline") in (b.name for b in baselines.load_baselines())
        else None
    )
    if "compare_mode" not in st.session_state or (linked and st.session_state.get("compare_mode") != linked):
        st.session_state["compare_mode"] = linked or "runs"
    mode = st.radio("compare", modes, horizontal=True, key="compare_mode")
    pick = {"commits": pick_commits, "pinned baseline": pick_baseline}.get(mode, pick_runs)
    base, head = pick(source, gpu, url)
    if mode == "commits":
        url.publish(base=None, head=None, baseline=None)
    elif mode == "pinned baseline":
        url.publish(base=None, commits=None)
    else:  # runs not offered on this GPU (another GPU's, before a switch) leave the link with the pickers
        url.publish(commits=None, baseline=None, **({} if "base" in url.bound else {"base": None, "head": None}))
    if base is None:
        return
    if base == head:
        st.info("Base and head are the same run: choose two different ones.")
        return
    devices = runs.runs_by_id(source, (base, head)).set_index("run_id")["gpu"]
    if set(devices) != {gpu}:
        st.error(
            f"Base {ui.md(base)} ran on {ui.md(devices.get(base))} and head {ui.md(head)} on "
            f"{ui.md(devices.get(head))}: runs are compared on one GPU only ({ui.md(gpu)} here), nothing is compared."
        )
        return
    show_comparison(source, base, head, gpu)


def summary(table, min_effect: float) -> None:
    """The comparison's counts by the verdict a reader sees (compare.shown_verdicts), two rows of
    tiles wide enough for their labels. Cases that moved by at least min_effect without samples
    for an interval are counted apart and said in words: 'regressions 0' beside a +8% step that
    old runs stored no samples of must not read as 'nothing slower'."""
    counts = table["shown"].value_counts()
    not_run = int((table["correctness"] == "not run").sum())
    failing = int(counts.get("correctness FAIL", 0) + counts.get("correctness FAIL (base too)", 0))
    under = [tiers.label(t, min_effect) for t in tiers.UNDER]
    moved = table[table["shown"] == compare.MOVED_NO_INTERVAL]
    named = [
        "correctness FAIL",
        "correctness FAIL (base too)",
        "regression",
        compare.MOVED_NO_INTERVAL,
        "improvement",
        "no change",
        compare.STILL_NO_INTERVAL,
        *under,
    ]
    first, second = st.columns(4), st.columns(4)
    first[0].metric(
        "correctness failures",
        failing if not_run < len(table) else "not run",
        help=f"{not_run} case(s) without a correctness check in the head run" if not_run else None,
    )
    first[1].metric(
        "regressions",
        int(counts.get("regression", 0)),
        help=f"the interval says slower by at least min_effect ({min_effect:.1%})",
    )
    first[2].metric(
        compare.MOVED_NO_INTERVAL,
        len(moved),
        help=f"stored medians differ by at least min_effect ({min_effect:.1%}), but a run stored no samples "
        "for an interval: neither a regression nor an improvement until measured again",
    )
    first[3].metric(
        "improvements",
        int(counts.get("improvement", 0)),
        help=f"the interval says faster by at least min_effect ({min_effect:.1%})",
    )
    second[0].metric("no change", int(counts.get("no change", 0) + counts.get(compare.STILL_NO_INTERVAL, 0)))
    second[1].metric(
        "under threshold",
        int(counts.reindex(under).fillna(0).sum()),
        help=f"the interval excludes no change, but the median moved by less than {min_effect:.1%}: "
        "real, too small to be a regression or improvement",
    )
    second[2].metric(
        "other (status)",
        int(len(table) - counts.reindex(named).fillna(0).sum()),
        help="new, removed, skipped or crashed cases: see their verdict",
    )
    if not moved.empty:
        slower = int((moved["ratio"] > 1).sum())
        st.warning(
            f"{len(moved)} case(s) moved by at least min_effect ({min_effect:.1%}) without an interval: "
            f"{slower} slower, {len(moved) - slower} faster (Δ% {moved['delta_pct'].min():+.1f} to "
            f"{moved['delta_pct'].max():+.1f}). A run stored no samples, so these are not counted as regressions "
            "or improvements: measure them again (column 'measure again') for a verdict."
        )


def show_comparison(source, base, head, gpu) -> None:
    thresholds = load_thresholds(gpu)
    table = compare.compare_runs(source, base, head, gpu)
    st.caption(
        f"Verdicts use CI's rule for {ui.md(gpu)}: head/base interval ({thresholds.confidence:.0%} two-level percentile "
        f"bootstrap, the PR comment's own code, over both runs' stored samples, {compare.RESAMPLES} resamples, fixed seed) "
        f"against a min_effect of {thresholds.min_effect:.1%}. Each run is a single round, so run-to-run drift is not "
        "in the interval; a same-job A/B over several rounds (what PR comments use) puts it there."
    )
    table = compare.shown_verdicts(table, thresholds.min_effect)
    both = runs.runs_by_id(source, (base, head)).set_index("run_id")
    shas, dirty = both["commit_sha"], bool(both["dirty"].any())
    table["measure_again"] = [
        reproduce.compare_command(c, shas.get(base), shas.get(head), dirty=dirty) or "" for c in table["case_id"]
    ]
    summary(table, thresholds.min_effect)
    verdicts = list(dict.fromkeys(table["shown"]))
    # Cases neither run measured (a CPU skips every GPU-only variant) say nothing about the change:
    # listed only on request, so the cases that were compared lead.
    shown = st.multiselect(
        "verdicts shown",
        verdicts,
        default=[v for v in verdicts if v != SKIPPED_IN_BOTH] or verdicts,
        key="compare_verdicts",
    )
    view = table[table["shown"].isin(shown)]
    hidden = int((table["shown"] == SKIPPED_IN_BOTH).sum()) if SKIPPED_IN_BOTH not in shown else 0
    if hidden:
        st.caption(
            f"{hidden} case(s) skipped in both runs are not listed: choose 'skipped in both' above to list them."
        )
    columns = delta_columns(
        view,
        timers.timer_tag(table["base_timing_mode"]),
        timers.timer_tag(table["head_timing_mode"]),
        timers.timer_name(list(table["base_timing_mode"]) + list(table["head_timing_mode"])),
        thresholds.min_effect,
    )
    view = view[list(columns)]
    ui.table(view, hide_index=True, column_config=columns, width="stretch", key="compare_table")
    notes = quality.explain(view["head_marks"]) + [
        n for n in quality.explain(view["base_marks"]) if n not in quality.explain(view["head_marks"])
    ]
    st.caption(" ".join(notes + [timers.basis(list(table["base_timing_mode"]) + list(table["head_timing_mode"]))]))
    st.download_button(
        "Download CSV",
        view.to_csv(index=False).encode("utf-8"),
        file_name=ui.safe_file_name(f"compare_{base}_vs_{head}.csv"),
        mime="text/csv",
        key="compare_csv",
    )


ui.run_page("compare", compare_page)
