"""Charts with commits on x draw them in commit order whatever a hash looks like,
and the Kernel page opens on a variant it can show (issue 26). AppTest over a real history
(tests/commit_axis_history.py); the browser side is tests/test_browser_pages.py."""

from __future__ import annotations

import pytest

from app_history import H200
from commit_axis_history import BUILT_VARIANTS, REGRESSED_VARIANT, RUNS, build_commit_axis_history, commit_sha
from svg_charts import role, series, svg_images
from test_app_pages import open_page, texts, trend_charts, trend_points


@pytest.fixture(scope="module")
def axis_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("commit_axis")
    return build_commit_axis_history(work / "history.duckdb", work / "bundles")


def test_a_trend_link_with_a_commit_range_shades_it_by_position(axis_history, monkeypatch):
    at = open_page(
        axis_history,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants="triton_fa2",
        shapes="l4_mission",
        commits=f"{commit_sha(3)}..{commit_sha(6)}",
    )
    (spec,) = trend_charts(at)
    # by position, each labelled with its commit: a label such as '4380e63' is never read as 4.38e66
    (shade,) = spec["frames"]["range"].to_dict("records")
    assert (shade["start"], shade["end"]) == (3, 6)
    labels = dict(zip(trend_points(spec)["pos"], trend_points(spec)["commit_label"]))
    assert [labels[p] for p in sorted(labels)] == [commit_sha(i)[:7] for i in range(len(labels))]


def test_kernel_draws_builds_in_commit_order_one_unit_per_chart(axis_history, monkeypatch):
    at = open_page(axis_history, monkeypatch, "views/kernel.py", gpu=H200, variant="triton_fa2")
    charts = [c for c in svg_images(at) if c.get("data-chart") == "lines"]
    in_commit_order = [commit_sha(i)[:7] for i in range(RUNS)]
    assert len(charts) >= 3
    for chart in charts:
        assert chart.get("data-x-type") == "category"
        axis = [tick.get("data-label") for tick in role(chart, "x-category")]
        assert axis == [x for x in in_commit_order if x in axis] and len(axis) >= 2
        # each point stands at its own commit's place on the axis
        for points in series(chart).values():
            assert [p.get("data-x") for p in points] == [x for x in axis if x in {p.get("data-x") for p in points}]
    registers = [c for c in charts if "registers" in c.get("data-y-title")]
    assert registers and all(set(series(c)) == {"registers_per_thread"} for c in registers)


def test_kernel_opens_on_a_variant_with_data_not_the_focus_without(axis_history, monkeypatch):
    at = open_page(axis_history, monkeypatch, "views/kernel.py")
    chosen = at.selectbox(key="kernel_variant").value
    assert chosen != REGRESSED_VARIANT and chosen in BUILT_VARIANTS + ("sdpa",)


def test_kernel_says_what_build_reports_the_history_has(axis_history, monkeypatch):
    at = open_page(axis_history, monkeypatch, "views/kernel.py", gpu=H200, variant="sdpa")
    (info,) = [i for i in texts(at, "info") if "build report" in i]
    assert "stores no build report for sdpa" in info and "cuda_wmma, triton_fa2" in info
    assert "only compiled variants" not in info
