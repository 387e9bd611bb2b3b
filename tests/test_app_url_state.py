"""Every view's state is in its URL: a link (built by history.links, as the PR comment and the first
page build them) opens the exact view, a change is written back to the URL, and that URL reopens
the same view. A run or value a link names is used as named, or the page says it cannot be."""

from __future__ import annotations

import shutil

import pytest
from streamlit.testing.v1 import AppTest

from app_history import H100, H200, NOISY_CASE, build_push_history, push_run_id
from attnwatch.history.store.db import open_write
from attnwatch.history.links import case_trend_query, commit_range, compare_query
from test_app_pages import frame_with, open_page, texts, trend_charts, trend_points
from attnwatch.history.store.location import parse_location

# Widget key -> URL parameter, per page.
BINDINGS = {
    "views/trends.py": {
        "trends_gpu": "gpu",
        "trends_branch": "branch",
        "trends_metric": "metric",
        "trends_variants": "variants",
        "trends_shapes": "shapes",
        "trends_dtype": "dtype",
        "trends_causal": "causal",
        "trends_max_runs": "runs",
        "trends_log": "log",
        "trends_norm": "norm",
        "trends_band": "band",
        "trends_commits": "commits",
    },
    "views/compare.py": {"compare_gpu": "gpu", "compare_base_runs": "base", "compare_head_runs": "head"},
    "views/kernel.py": {
        "kernel_gpu": "gpu",
        "kernel_variant": "variant",
        "kernel_roofline_variants": "variants",
        "kernel_roofline_dtype": "dtype",
    },
    "views/alerts.py": {
        "alerts_status": "status",
        "alerts_kind": "kind",
        "alerts_group": "group",
        "alerts_alert": "alert",
    },
}


@pytest.fixture(scope="module")
def push_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("url_history")
    db = work / "history.duckdb"
    return db, build_push_history(db, work / "bundles")


def url_of(at: AppTest) -> dict[str, str]:
    """The app's current query string as one value per parameter."""
    return {k: (v[-1] if isinstance(v, list) else v) for k, v in at.query_params.items()}


def state(at: AppTest, page: str) -> dict:
    return {key: _widget(at, key).value for key in BINDINGS[page]}


def _widget(at: AppTest, key: str):
    for kind in ("selectbox", "multiselect", "toggle", "slider", "text_input", "radio"):
        try:
            return getattr(at, kind)(key=key)
        except KeyError:
            continue
    raise AssertionError(f"no widget {key}")


def reopened(db, monkeypatch, page: str, at: AppTest) -> AppTest:
    return open_page(db, monkeypatch, page, **url_of(at))


def test_trends_link_from_the_first_page_opens_that_plot_and_reopens_from_its_url(push_history, monkeypatch):
    db, ids = push_history
    query = case_trend_query(H100, NOISY_CASE, commits=commit_range(ids["base_commit"], ids["head_commit"]))
    at = open_page(db, monkeypatch, "views/trends.py", **query)
    assert at.selectbox(key="trends_gpu").value == H100
    assert at.multiselect(key="trends_variants").value == ["triton_fa2"]
    assert at.multiselect(key="trends_shapes").value == ["h100_small"]
    assert at.toggle(key="trends_causal").value is True
    assert at.text_input(key="trends_commits").value == query["commits"]
    (spec,) = trend_charts(at)
    (name,) = set(trend_points(spec)["series"])
    assert list(trend_points(spec, name)["run_id"]) == [push_run_id(H100, i) for i in range(8)]
    assert "commit_range" in spec["layers"], "the commit range is shaded"
    # The view writes its whole state to the URL, and that URL reopens it unchanged.
    assert {k: url_of(at)[k] for k in query} == query
    again = reopened(db, monkeypatch, "views/trends.py", at)
    assert state(again, "views/trends.py") == state(at, "views/trends.py")


def test_trends_change_goes_to_the_url_and_reopens(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/trends.py")
    at.toggle(key="trends_log").set_value(True).run()
    at.selectbox(key="trends_metric").set_value("gap_to_baseline").run()
    at.multiselect(key="trends_variants").set_value(["sdpa_flash", "triton_fa2"]).run()
    assert (url_of(at)["log"], url_of(at)["metric"], url_of(at)["variants"]) == (
        "1",
        "gap_to_baseline",
        "sdpa_flash,triton_fa2",
    )
    again = reopened(db, monkeypatch, "views/trends.py", at)
    assert state(again, "views/trends.py") == state(at, "views/trends.py")
    (spec,) = trend_charts(again)
    assert spec["layers"]["lines"]["encoding"]["y"]["scale"]["type"] == "log"


def test_trends_values_a_link_names_but_the_history_lacks_are_named(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/trends.py", gpu=H200, variants="triton_fa2,no_such_kernel")
    assert at.multiselect(key="trends_variants").value == ["triton_fa2"]
    assert any("no_such_kernel" in w for w in texts(at, "warning"))
    at = open_page(db, monkeypatch, "views/trends.py", gpu="NVIDIA B200")
    assert any("NVIDIA B200" in w and "no runs" in w for w in texts(at, "warning"))


@pytest.mark.parametrize(
    "page, query",
    [
        ("views/kernel.py", {"gpu": H200, "variant": "cuda_wmma", "variants": "cuda_wmma,triton_fa2", "dtype": "fp16"}),
        ("views/alerts.py", {"status": "open", "kind": "regression", "alert": "5"}),
    ],
)
def test_each_view_opens_from_its_url_and_reopens_identically(push_history, monkeypatch, page, query):
    db, _ = push_history
    at = open_page(db, monkeypatch, page, **query)
    assert not [w for w in texts(at, "warning") if "could not read" in w]
    opened = state(at, page)
    for key, param in BINDINGS[page].items():
        if param in query:
            value = opened[key]
            shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            assert shown == query[param], (key, value)
    assert state(reopened(db, monkeypatch, page, at), page) == opened


def test_compare_by_commit_range_link(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(
        db,
        monkeypatch,
        "views/compare.py",
        **compare_query(H200, commits=commit_range(ids["base_commit"][:8], ids["head_commit"][:8])),
    )
    assert at.radio(key="compare_mode").value == "commits"
    assert any(ids["h200_base"] in c and ids["h200_head"] in c for c in texts(at, "caption"))
    assert (frame_with(at, "verdict")["verdict"] == "regression").sum() == 4
    missing = open_page(db, monkeypatch, "views/compare.py", gpu=H200, commits="deadbeef..07beef")
    assert any("deadbeef" in e and "nothing is compared" in e for e in texts(missing, "error"))


@pytest.fixture(scope="module")
def crowded_history(push_history, tmp_path_factory):
    """The push history plus 600 newer runs on the H200 (another branch): the runs a link names
    are far beyond the newest few hundred."""
    db, ids = push_history
    copy = tmp_path_factory.mktemp("crowded") / "history.duckdb"
    shutil.copyfile(db, copy)
    with open_write(parse_location(copy)) as con:
        con.execute(
            """
            INSERT INTO runs SELECT runs.* REPLACE ('bulk-' || i AS run_id, 'feature/bulk' AS branch,
                   started_at + INTERVAL 1 DAY + i * INTERVAL 1 MINUTE AS started_at, md5('bulk-' || i) AS content_sha256)
            FROM runs, range(600) t(i) WHERE run_id = ?
            """,
            [ids["h200_head"]],
        )
    return copy, ids


def test_a_run_named_in_the_url_is_never_silently_replaced(crowded_history, monkeypatch):
    db, ids = crowded_history
    old = push_run_id(H200, 0)
    at = open_page(db, monkeypatch, "views/compare.py", gpu=H200, base=old, head=ids["h200_head"])
    assert at.selectbox(key="compare_base_runs").value == old
    assert at.selectbox(key="compare_head_runs").value == ids["h200_head"]
    run = open_page(db, monkeypatch, "views/run.py", run=old)
    assert run.selectbox(key="run_pick").value == old
    gone = open_page(db, monkeypatch, "views/compare.py", gpu=H200, base="no-such-run", head=ids["h200_head"])
    assert any("no-such-run" in e and "not in this history" in e for e in texts(gone, "error"))
    assert not [d for d in gone.dataframe if "verdict" in d.value.columns]


def test_compare_search_reaches_any_run(crowded_history, monkeypatch):
    db, _ = crowded_history
    at = open_page(db, monkeypatch, "views/compare.py", gpu=H200)
    old = push_run_id(H200, 1)
    assert old not in at.selectbox(key="compare_base_runs").options  # listed: the newest runs only
    at.text_input(key="compare_search").input("push-01").run()
    options = at.selectbox(key="compare_base_runs").options
    assert any(old in o for o in options)
