"""The Kernel page's charts on the shipped H200 sample: a build figure the builds never stored is
said, not drawn as an empty frame; a constant series is drawn from zero, not stretched over a
range of one byte; the roofline follows the variant picked; its log axes are labelled once per
decade."""

from __future__ import annotations

import pytest

from demo_sample import H200, build_demo_history
from test_app_pages import open_page, plotly_specs, texts


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernel_demo")
    return build_demo_history(work / "history.duckdb", work)


def charts_by_title(at) -> dict[str, dict]:
    return {spec["layout"]["yaxis"]["title"]["text"]: spec for spec in plotly_specs(at)}


def test_kernel_opens_on_this_pushs_regression_with_every_build_chart_drawn(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    assert (at.selectbox(key="kernel_gpu").value, at.selectbox(key="kernel_variant").value) == (H200, "cuda_wmma")
    charts = charts_by_title(at)
    spills = charts["spill / stack bytes per thread"]
    assert {t["name"] for t in spills["data"]} == {"spill_store_bytes", "spill_load_bytes", "stack_frame_bytes"}
    assert spills["data"][0]["y"][-1] == 16 and spills["data"][0]["y"][0] == 0  # the push's spills
    # 54,528 bytes in every build: an axis from 0, not 54.527k-54.529k.
    smem = charts["shared memory per block (bytes)"]
    assert set(smem["data"][0]["y"]) == {54528}
    low, high = smem["layout"]["yaxis"]["range"]
    assert low == 0 and 54528 < high < 2 * 54528
    assert charts["registers per thread"]["layout"]["yaxis"].get("range") is None  # 157 → 128 moves: autorange


def test_a_build_figure_never_stored_is_said_not_drawn_empty(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py", variant="triton_fa2")
    assert at.selectbox(key="kernel_variant").value == "triton_fa2"
    titles = [spec["layout"]["yaxis"]["title"]["text"] for spec in plotly_specs(at)]
    assert "spill / stack bytes per thread" not in titles  # Triton's builds store no ptxas spills
    note = [t for t in texts(at, "info") if t.startswith("No data")]
    assert len(note) == 1 and "triton_fa2" in note[0] and "spill" in note[0], texts(at, "info")


def test_the_roofline_follows_the_variant_picked(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    assert at.multiselect(key="kernel_roofline_variants").value == ["cuda_wmma"]
    at.selectbox(key="kernel_variant").set_value("triton_fa2").run()
    assert not at.exception
    assert at.multiselect(key="kernel_roofline_variants").value == ["triton_fa2"]
    (roofline,) = [s for s in plotly_specs(at) if s["layout"]["xaxis"].get("type") == "log"]
    points = [t["name"] for t in roofline["data"] if t.get("mode") == "markers"]
    assert points and all(name.startswith("triton_fa2") for name in points), points
    # A choice made in the roofline's own picker stands while the page's variant does.
    at.multiselect(key="kernel_roofline_variants").set_value(["triton_fa2", "cuda_wmma"]).run()
    assert at.multiselect(key="kernel_roofline_variants").value == ["triton_fa2", "cuda_wmma"]


def test_log_axes_are_labelled_once_per_decade(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    (roofline,) = [s for s in plotly_specs(at) if s["layout"]["xaxis"].get("type") == "log"]
    for axis in ("xaxis", "yaxis"):
        assert roofline["layout"][axis]["dtick"] == 1, roofline["layout"][axis]
