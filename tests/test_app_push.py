"""The first page, "This push": every GPU's newest main run against the run before it, in one view,
on a history with planted steps on two GPUs and a correctness failure (tests/app_history.py)."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import parse_qs

import pytest

from app_history import (
    DISPATCH_CASE,
    DISPATCH_GRAPH_US,
    H100,
    H200,
    L4,
    NOISY_CASE,
    PUSH_INCORRECT_CASE,
    PUSH_REGRESSED_VARIANT,
    START,
    build_history,
    build_push_history,
)
from bundle_factory import make_bundle
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import open_page, texts
from attnwatch.history.store.location import parse_location

REGRESSED = {
    f"{PUSH_REGRESSED_VARIANT}/{s}/fp16/{m}" for s in ("l4_mission", "h100_small") for m in ("causal", "noncausal")
}


@pytest.fixture(scope="module")
def push_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("push_history")
    db = work / "history.duckdb"
    return db, build_push_history(db, work / "bundles")


def open_push(db, monkeypatch):
    """The first page with every table shown (each is drawn on request: no data grid on the first view)."""
    at = open_page(db, monkeypatch, "views/push.py")
    assert not at.dataframe
    for toggle in at.toggle:
        if toggle.key and toggle.key.endswith("_table"):
            toggle.set_value(True)
    return at.run()


def links(at):
    """(label, page name, query) of every page link, query parsed."""
    return [
        (
            p.proto.label,
            p.proto.page.split("/")[-1].removesuffix(".py"),
            {k: v[0] for k, v in parse_qs(p.proto.query_string).items()},
        )
        for p in at.get("page_link")
    ]


def test_first_page_is_this_push(push_history, monkeypatch):
    db, _ = push_history
    at = open_push(db, monkeypatch)
    assert [t.value for t in at.title] == ["This push"]
    assert not [w for w in texts(at, "warning") if "could not read" in w]


def trend_links(markdown: str) -> list[dict[str, str]]:
    """The Trends queries a markdown table links to, parsed."""
    return [{k: v[0] for k, v in parse_qs(q).items()} for q in re.findall(r"\]\(trends\?([^)\s]+)\)", markdown)]


def test_correctness_first_then_regressions_grouped_by_cause_with_intervals_and_trend_links(push_history, monkeypatch):
    db, ids = push_history
    at = open_push(db, monkeypatch)
    headings = [h.value for h in at.subheader]
    assert headings[:2] == ["Correctness failures (1)", "Regressions (8)"]
    # One cause (triton_fa2 slower on two shapes, two modes, two GPUs): one line, its cases inside.
    causes = [e for e in at.expander if "triton" in e.label]
    assert len(causes) == 1
    label = causes[0].label.replace("\\", "")
    assert "**triton_fa2** · 8 case(s) on" in label and H200 in label and H100 in label
    # Every line's interval clears min_effect, the unconverged one's too: all eight are real.
    assert re.search(r"\+1\d\.\d% to \+1\d\.\d% · real slowdown\? yes 8$", label), label
    why, table = (m.value for m in causes[0].markdown)
    # First why it moved, as the PR comment says it: the pushed commit, the build report, the counters.
    assert why.startswith("**Commit** `07beefbeef`: Push 7\\: tune tiles"), why
    assert "**Build** (ptxas, before → after): unchanged\\: registers/thread 128" in why
    assert "**ncu cause**: none" in why  # neither run profiled it
    assert "real slowdown?" in table and "real speed-up?" not in table
    seen = set()
    for query in trend_links(table):
        case = f"{query['variants']}/{query['shapes']}/{query['dtype']}/{'causal' if query['causal'] == '1' else 'noncausal'}"
        seen.add((query["gpu"], case))
        assert query["commits"] == f"{ids['base_commit']}..{ids['head_commit']}"
        assert query["metric"] == "median_us"
    assert seen == {(g, c) for g in (H200, H100) for c in REGRESSED}
    rows = [r for r in table.splitlines()[2:]]
    assert len(rows) == 8 and all(re.search(r"\*\*\+1\d\.\d%\*\* \| \[\+", r) for r in rows), rows
    # Sorted by the interval's lower bound, largest first: the table says the same.
    table = next(d.value for d in at.dataframe if "real" in d.value.columns and len(d.value) == 8)
    assert list(table["ratio_low"]) == sorted(table["ratio_low"], reverse=True)
    assert (table["ratio_low"] > 1.05).all()
    assert "host" not in table.columns  # one host per GPU model: the column would read None on every row


def test_is_it_real_answers_from_the_stored_evidence(push_history, monkeypatch):
    db, _ = push_history
    at = open_push(db, monkeypatch)
    table = next(d.value for d in at.dataframe if "real" in d.value.columns and len(d.value) == 8)
    real = dict(zip(zip(table["gpu"], table["case_id"]), table["real"]))
    # Unconverged, but its whole interval lies beyond the H100's min_effect: decided, so real.
    assert real[(H100, NOISY_CASE)].startswith("yes: the interval clears ±3% (samples unconverged")
    clean = [v for k, v in real.items() if k != (H100, NOISY_CASE)]
    assert all(v.startswith("yes: clean samples on both sides, gap to sdpa +") for v in clean), clean


def test_correctness_failure_listed_and_not_run_said_so(push_history, monkeypatch):
    db, ids = push_history
    at = open_push(db, monkeypatch)
    failures = [(label, q) for label, page, q in links(at) if page == "run"]
    assert len(failures) == 1
    label, query = failures[0]
    assert PUSH_INCORRECT_CASE in label and "FAIL" in label and query == {"run": ids["h200_head"]}
    summary = {m.value.split("**")[1]: m.value for m in at.markdown if m.value.startswith("**NVIDIA")}
    assert "1 correctness failure(s)" in summary[H200]
    assert "correctness **not run**" in summary[H100] and "0 correctness" not in summary[H100]
    assert any(ids["h100_head"] in i.replace("\\", "") and "not run" in i for i in texts(at, "info"))
    every = next(d.value for d in at.dataframe if len(d.value) == 32)
    assert set(every[every["gpu"] == H100]["correctness"]) == {"not run"}


def test_nothing_else_is_called_a_change(push_history, monkeypatch):
    db, _ = push_history
    at = open_push(db, monkeypatch)
    every = next(d.value for d in at.dataframe if len(d.value) == 32)
    flagged = every[every["verdict"] != "no change"]
    assert set(zip(flagged["gpu"], flagged["case_id"])) == {(g, c) for g in (H200, H100) for c in REGRESSED} | {
        (H200, PUSH_INCORRECT_CASE)
    }
    assert "Improvements (0)" in [h.value for h in at.subheader]


def test_dispatch_bound_case_shows_its_graph_time_and_mark(push_history, monkeypatch):
    db, _ = push_history
    at = open_push(db, monkeypatch)
    every = next(d.value for d in at.dataframe if len(d.value) == 32).set_index(["gpu", "case_id"])
    row = every.loc[(H200, DISPATCH_CASE)]
    assert row["head_graph_median_us"] == pytest.approx(DISPATCH_GRAPH_US)
    assert row["head_marks"] == f"dispatch-bound (graph {DISPATCH_GRAPH_US:.3g} µs)"
    assert row["head_us"] > 1.2 * DISPATCH_GRAPH_US


def test_a_gpu_with_one_run_and_a_failed_newest_run_are_explained(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    runs = build_history(db, tmp_path / "bundles")  # newest H200 main run failed; L4 has one run
    at = open_push(db, monkeypatch)
    assert not [w for w in texts(at, "warning") if "could not read" in w]
    assert any(runs["failed"] in w and "'failed'" in w for w in texts(at, "warning"))
    summary = {m.value.split("**")[1]: m.value for m in at.markdown if m.value.startswith("**NVIDIA")}
    assert "is its first main run: nothing to compare it with yet" in summary[L4]
    assert "regression" not in summary[L4] and "0 " not in summary[L4]  # no counts without a comparison
    assert f"vs run `{runs['latest_complete']}`" in summary[H200]  # a failed run is never the base


# --- Re-measured commits, improvements, two hosts, and pages with nothing to compare ---------------
#
# H200: three main commits, then the third commit measured again with triton_fa2 12% slower (as
# a noisy re-run might read): an A/A repeat, never a regression. H100 (hosts a and b, one series
# each): the newest commit makes triton_fa2 12% faster.


def _bundle(work, run_id, i, *, gpu=H200, hostname="gpu-runner-1", commit=None, scale=None, branch="main", seed=0):
    return make_bundle(
        work / run_id,
        run_id=run_id,
        variants=("sdpa", "triton_fa2"),
        gpu_name=gpu,
        hostname=hostname,
        commit_sha=commit or f"{i:02d}" + "ab" * 19,
        started_at=START + timedelta(hours=i),
        variant_scale=scale,
        branch=branch,
        seed=seed,
    )


@pytest.fixture(scope="module")
def repeat_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("repeat_history")
    db = work / "history.duckdb"
    bundles = [_bundle(work, f"h200-{i}", i, seed=i) for i in range(3)]
    bundles.append(_bundle(work, "h200-rerun", 3, commit="02" + "ab" * 19, scale={"triton_fa2": 1.12}, seed=3))
    for host in ("a", "b"):
        bundles += [
            _bundle(
                work,
                f"h100{host}-{i}",
                i,
                gpu=H100,
                hostname=f"host-{host}",
                seed=10 + i,
                scale={"triton_fa2": 0.88} if i == 2 else None,
            )
            for i in range(3)
        ]
    ingest_paths(parse_location(db), bundles)
    return db


def test_a_re_measured_commit_is_noise_not_a_change(repeat_history, monkeypatch):
    at = open_push(repeat_history, monkeypatch)
    summary = [m.value for m in at.markdown if m.value.startswith(f"**{H200}**")]
    assert len(summary) == 1 and "same commit, an A/A repeat: its differences are noise, not changes" in summary[0]
    assert "regression(s)" not in summary[0] and "improvement(s)" not in summary[0]
    every = next(d.value for d in at.dataframe if len(d.value) == 8 * 3)
    h200 = every[every["gpu"] == H200]
    assert (h200["verdict"] == "regression").sum() == 4  # the interval still says the numbers differ...
    headings = [h.value for h in at.subheader]
    assert "Regressions (0)" in headings  # ...but no line calls it one
    assert "Same commit re-measured: noise, not changes (4)" in headings


def test_improvements_ask_whether_the_speed_up_is_real(repeat_history, monkeypatch):
    at = open_push(repeat_history, monkeypatch)
    assert "Improvements (8)" in [h.value for h in at.subheader]
    (cause,) = [e for e in at.expander if "triton" in e.label]
    assert "8 case(s)" in cause.label and "real speed-up?" in cause.label and "slowdown" not in cause.label
    table = cause.markdown[-1].value
    assert "| host |" in table and "real speed-up?" in table and "real slowdown?" not in table
    assert {q["host"] for q in trend_links(table)} == {"host-a", "host-b"}
    every = next(d.value for d in at.dataframe if len(d.value) == 8 * 3)
    assert "host" in every.columns  # two hosts of the H100: the column now says something


def test_the_pair_is_the_rule_of_main_run_before(repeat_history, monkeypatch):
    from attnwatch.app.data.push import newest_main_runs
    from attnwatch.app.data.runs import main_run_before
    from attnwatch.app.data.store import current_source

    source = current_source(repeat_history)
    pairs = newest_main_runs(source)
    assert len(pairs) == 3 and pairs["base_run"].notna().all()
    assert [main_run_before(source, r) for r in pairs["run_id"]] == list(pairs["base_run"])
    assert dict(zip(pairs["run_id"], pairs["same_commit"])) == {"h200-rerun": True, "h100a-2": False, "h100b-2": False}


def test_one_run_per_gpu_says_what_to_do_and_counts_nothing(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [_bundle(tmp_path, "h200-only", 0)])
    at = open_push(db, monkeypatch)
    (summary,) = [m.value for m in at.markdown if m.value.startswith(f"**{H200}**")]
    assert "first main run: nothing to compare it with yet" in summary and "regression" not in summary
    (info,) = texts(at, "info")
    assert "one main run so far" in info and "attnwatch run --ingest" in info
    assert [h.value for h in at.subheader] == []


def test_runs_on_another_default_branch_are_named_with_the_fix(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [_bundle(tmp_path, f"m-{i}", i, branch="master", seed=i) for i in range(2)])
    at = open_push(db, monkeypatch)
    (info,) = texts(at, "info")
    assert "No run on the default branch `main`" in info and "`master` (2 runs)" in info
    assert [c.value for c in at.code] == ["attnwatch history default-branch master"]


def test_every_interval_is_the_one_compare_gives_the_pair(push_history):
    """The first page computes all GPUs' intervals in one call; each must be Compare's own."""
    from attnwatch.app.data import compare
    from attnwatch.app.data.push import newest_main_runs, push_changes
    from attnwatch.app.data.store import current_source

    db, _ = push_history
    source = current_source(db)
    changes = push_changes(source)
    for pair in newest_main_runs(source).itertuples():
        alone = compare.compare_runs(source, pair.base_run, pair.run_id, pair.gpu).set_index("case_id")
        mine = changes[changes["head_run"] == pair.run_id].set_index("case_id").loc[alone.index]
        for column in ("ratio_low", "ratio_high", "verdict"):
            assert list(mine[column]) == list(alone[column]), (pair.gpu, column)


def test_a_gpu_wide_move_is_told_apart_from_the_reference_by_its_gap_not_its_name():
    """The reference (gap 1 exactly on both sides, whatever the registry names it) moving with
    the GPU is not called "GPU-wide? ... moved as much"; a variant whose gap stayed flat is."""
    from types import SimpleNamespace

    from attnwatch.app.data.push import assess

    def row(variant, base_gap, head_gap):
        return SimpleNamespace(
            verdict="regression",
            variant=variant,
            base_marks="",
            head_marks="",
            base_graph_median_us=None,
            head_graph_median_us=None,
            base_gap=base_gap,
            head_gap=head_gap,
        )

    assert assess(row("triton_fa2", 1.20, 1.205), 0.02).startswith("GPU-wide?")
    assert not assess(row("my_reference", 1.0, 1.0), 0.02).startswith("GPU-wide?")
    assert assess(row("sdpa", 0.9, 0.9), 0.02).startswith("GPU-wide?")  # sdpa when it is not the reference


def test_a_decisive_interval_is_real_whatever_the_convergence():
    """+14.6% with an interval of ±0.15 points reads "yes" though neither side's samples converged
    (the interval carries their spread); an unconverged change whose interval reaches inside
    min_effect still reads "check", and so does a throttled one however sure its interval."""
    from types import SimpleNamespace

    from attnwatch.app.data.push import assess

    def row(low, high, marks="unconverged (2000 samples, IQR/median 2.0%)", verdict="regression"):
        return SimpleNamespace(
            verdict=verdict,
            ratio=(low + high) / 2,
            ratio_low=low,
            ratio_high=high,
            base_marks=marks,
            head_marks=marks,
            base_graph_median_us=None,
            head_graph_median_us=None,
            base_gap=None,
            head_gap=None,
        )

    assert assess(row(1.1441, 1.1469), 0.02).startswith("yes: the interval clears ±2%")
    assert assess(row(0.8695, 0.8732, verdict="improvement"), 0.02).startswith("yes: the interval clears ±2%")
    assert assess(row(1.01, 1.05), 0.02).startswith("check: base unconverged")
    throttled = "unconverged (300 samples, IQR/median 3.0%); throttled (12 of 300 samples)"
    answer = assess(row(1.1441, 1.1469, throttled), 0.02)
    assert answer.startswith("check: base throttled") and "unconverged" not in answer


def test_latencies_over_a_millisecond_read_in_plain_numbers(tmp_path, monkeypatch):
    """A push of millisecond cases writes "1,292 → 1,447", never "1.29e+03 → 1.45e+03"."""
    db = tmp_path / "history.duckdb"
    bundles = [
        make_bundle(
            tmp_path / f"slow-{i}",
            run_id=f"slow-{i}",
            variants=("sdpa", "triton_fa2"),
            gpu_name=H200,
            commit_sha=f"{i:02d}" + "cd" * 19,
            started_at=START + timedelta(hours=i),
            latency_scale=100.0,
            variant_scale={"triton_fa2": 1.12} if i == 1 else None,
            seed=40 + i,
        )
        for i in range(2)
    ]
    ingest_paths(parse_location(db), bundles)
    at = open_push(db, monkeypatch)
    (cause,) = [e for e in at.expander if "triton" in e.label]
    table = cause.markdown[-1].value
    spans = re.findall(r"\| ([\d,.]+) → ([\d,.]+) \|", table)
    assert spans and "e+0" not in table, table
    assert ("1,716", "1,923") in spans and ("859", "962") in spans, spans  # whole µs from 100 µs on, grouped
