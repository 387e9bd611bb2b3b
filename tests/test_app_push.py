"""The first page, "This push": every GPU's newest main run against the run before it, in one view,
on a history with planted steps on two GPUs and a correctness failure (tests/app_history.py)."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from app_history import (
    DISPATCH_CASE, DISPATCH_GRAPH_US, H100, H200, L4, NOISY_CASE, PUSH_INCORRECT_CASE, PUSH_REGRESSED_VARIANT,
    build_history, build_push_history,
)
from test_app_pages import open_page, texts

REGRESSED = {f"{PUSH_REGRESSED_VARIANT}/{s}/fp16/{m}" for s in ("l4_mission", "h100_small") for m in ("causal", "noncausal")}


@pytest.fixture(scope="module")
def push_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("push_history")
    db = work / "history.duckdb"
    return db, build_push_history(db, work / "bundles")


def links(at):
    """(label, page name, query) of every page link, query parsed."""
    return [(p.proto.label, p.proto.page.split("/")[-1].removesuffix(".py"),
             {k: v[0] for k, v in parse_qs(p.proto.query_string).items()}) for p in at.get("page_link")]


def test_first_page_is_this_push(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/push.py")
    assert [t.value for t in at.title] == ["This push"]
    assert not [w for w in texts(at, "warning") if "could not read" in w]


def test_regressions_of_both_gpus_come_first_with_intervals_and_a_trend_link(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/push.py")
    headings = [h.value for h in at.subheader]
    assert headings[:2] == ["Regressions (8)", "Correctness failures (1)"]
    regression_links = [(label, q) for label, page, q in links(at) if page == "trends"][:8]
    seen = set()
    for label, query in regression_links:
        gpu = query["gpu"]
        case = f"{query['variants']}/{query['shapes']}/{query['dtype']}/{'causal' if query['causal'] == '1' else 'noncausal'}"
        seen.add((gpu, case))
        assert f"**{gpu}**" in label.replace("\\", "")
        assert "+1" in label and "[+" in label  # Δ% and an interval above zero
        assert query["commits"] == f"{ids['base_commit']}..{ids['head_commit']}"
        assert query["metric"] == "median_us"
    assert seen == {(g, c) for g in (H200, H100) for c in REGRESSED}
    # Sorted by the interval's lower bound, largest first: the table says the same.
    table = next(d.value for d in at.dataframe if "real" in d.value.columns and len(d.value) == 8)
    assert list(table["ratio_low"]) == sorted(table["ratio_low"], reverse=True)
    assert (table["ratio_low"] > 1.05).all()


def test_is_it_real_answers_from_the_stored_evidence(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/push.py")
    table = next(d.value for d in at.dataframe if "real" in d.value.columns and len(d.value) == 8)
    real = dict(zip(zip(table["gpu"], table["case_id"]), table["real"]))
    assert real[(H100, NOISY_CASE)].startswith("check: head unconverged (50 samples, IQR/median 8.0%)")
    clean = [v for k, v in real.items() if k != (H100, NOISY_CASE)]
    assert all(v.startswith("yes: clean samples on both sides, gap-to-SDPA +") for v in clean), clean


def test_correctness_failure_listed_and_not_run_said_so(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/push.py")
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
    at = open_page(db, monkeypatch, "views/push.py")
    every = next(d.value for d in at.dataframe if len(d.value) == 32)
    flagged = every[every["verdict"] != "no change"]
    assert set(zip(flagged["gpu"], flagged["case_id"])) == {(g, c) for g in (H200, H100) for c in REGRESSED} | {
        (H200, PUSH_INCORRECT_CASE)}
    assert "Improvements (0)" in [h.value for h in at.subheader]


def test_dispatch_bound_case_shows_its_graph_time_and_mark(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/push.py")
    every = next(d.value for d in at.dataframe if len(d.value) == 32).set_index(["gpu", "case_id"])
    row = every.loc[(H200, DISPATCH_CASE)]
    assert row["head_graph_median_us"] == pytest.approx(DISPATCH_GRAPH_US)
    assert row["head_marks"] == f"dispatch-bound (graph {DISPATCH_GRAPH_US:.3g} µs)"
    assert row["head_us"] > 1.2 * DISPATCH_GRAPH_US


def test_a_gpu_with_one_run_and_a_failed_newest_run_are_explained(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    runs = build_history(db, tmp_path / "bundles")  # newest H200 main run failed; L4 has one run
    at = open_page(db, monkeypatch, "views/push.py")
    assert not [w for w in texts(at, "warning") if "could not read" in w]
    assert any(runs["failed"] in w and "'failed'" in w for w in texts(at, "warning"))
    summary = {m.value.split("**")[1]: m.value for m in at.markdown if m.value.startswith("**NVIDIA")}
    assert "no earlier main run" in summary[L4]
    assert f"vs `{runs['latest_complete']}`" in summary[H200]  # a failed run is never the base
