"""The Kernel page's charts on the shipped H200 sample, read back from the SVG images the server
draws (app/kernel_charts.py): a build figure the builds never stored is said, not drawn as an
empty frame; a constant series is drawn from zero, not stretched over a range of one byte; the
roofline follows the variant picked; its log axes are labelled once per decade; the page draws
no chart in a chart library."""

from __future__ import annotations

import math

import pytest

from demo_sample import H200, build_demo_history
from svg_charts import charts_by_key, role, series, svg_images, tip, values
from test_app_pages import open_page, texts


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernel_demo")
    return build_demo_history(work / "history.duckdb", work)


def charts_by_title(at) -> dict:
    return {chart.get("data-y-title"): chart for chart in svg_images(at)}


def test_kernel_opens_on_this_pushs_regression_with_every_build_chart_drawn(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    assert (at.selectbox(key="kernel_gpu").value, at.selectbox(key="kernel_variant").value) == (H200, "cuda_wmma")
    assert not at.get("plotly_chart") and not at.get("vega_lite_chart")  # every chart is an SVG image
    charts = charts_by_title(at)
    assert set(charts_by_key(at)) >= {"build_chart", "spill_chart", "smem_chart", "ncu_chart", "roofline_chart"}
    spills = charts["spill / stack bytes per thread"]
    assert set(series(spills)) == {"spill_store_bytes", "spill_load_bytes", "stack_frame_bytes"}
    stores = values(spills)["spill_store_bytes"]
    assert stores[-1] == 16 and stores[0] == 0  # the push's spills
    newest = series(spills)["spill_store_bytes"][-1]
    assert tip(newest).startswith("spill_store_bytes 16 · commit ") and " · run " in tip(newest)
    # 54,528 bytes in every build: an axis from 0, not 54,527-54,529.
    smem = charts["shared memory per block (bytes)"]
    assert set(values(smem)["shared_mem_bytes"]) == {54528}
    assert smem.get("data-y-range") == "flat"
    low, high = float(smem.get("data-y-min")), float(smem.get("data-y-max"))
    assert low == 0 and 54528 < high < 2 * 54528
    assert all("e+" not in (t.text or "") for t in role(smem, "y-tick"))  # plain numbers, never 5.45e+04
    registers = charts["registers per thread"]
    assert registers.get("data-y-range") == "auto"  # 157 → 128 moves: autorange
    assert float(registers.get("data-y-min")) > 100 and float(registers.get("data-y-max")) < 170
    assert values(registers)["registers_per_thread"][-1] == 128


def test_a_build_figure_never_stored_is_said_not_drawn_empty(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py", variant="triton_fa2")
    assert at.selectbox(key="kernel_variant").value == "triton_fa2"
    titles = list(charts_by_title(at))
    assert "spill / stack bytes per thread" not in titles  # Triton's builds store no ptxas spills
    assert "spill_chart" not in charts_by_key(at)
    note = [t for t in texts(at, "info") if t.startswith("No data")]
    assert len(note) == 1 and "triton_fa2" in note[0] and "spill" in note[0], texts(at, "info")


def test_the_roofline_follows_the_variant_picked(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    assert at.multiselect(key="kernel_roofline_variants").value == ["cuda_wmma"]
    at.selectbox(key="kernel_variant").set_value("triton_fa2").run()
    assert not at.exception
    assert at.multiselect(key="kernel_roofline_variants").value == ["triton_fa2"]
    (roofline,) = [c for c in svg_images(at) if c.get("data-x-type") == "log"]
    points = list(series(roofline))
    assert points and all(name.startswith("triton_fa2") for name in points), points
    legend = [e.get("data-name") for e in role(roofline, "legend")]
    assert set(points) <= set(legend)  # every point series is named in the legend
    assert all(" · commit " in tip(p) and " · run " in tip(p) for p in role(roofline, "point"))
    # A choice made in the roofline's own picker stands while the page's variant does.
    at.multiselect(key="kernel_roofline_variants").set_value(["triton_fa2", "cuda_wmma"]).run()
    assert at.multiselect(key="kernel_roofline_variants").value == ["triton_fa2", "cuda_wmma"]


def test_log_axes_are_labelled_once_per_decade(demo_db, monkeypatch):
    at = open_page(demo_db, monkeypatch, "views/kernel.py")
    roofline = charts_by_key(at)["roofline_chart"]
    assert (roofline.get("data-x-type"), roofline.get("data-y-type")) == ("log", "log")
    for axis in ("x", "y"):
        labelled = [float(t.get("data-value")) for t in role(roofline, f"{axis}-tick")]
        low, high = float(roofline.get(f"data-{axis}-min")), float(roofline.get(f"data-{axis}-max"))
        decades = [10.0**k for k in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)]
        assert labelled == pytest.approx(decades) and len(labelled) >= 2, (axis, labelled)
        assert role(roofline, f"{axis}-minor")  # 2..9 times each decade: unlabelled ticks
        assert all(m.text is None for m in role(roofline, f"{axis}-minor"))
    x_labels = [t.text for t in role(roofline, "x-tick")]
    assert "1,000" in x_labels and "10" in x_labels  # plain numbers, grouped
