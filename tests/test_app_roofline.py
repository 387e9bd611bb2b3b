"""The Kernel page's roofline draws what CI stored (ncu_cases.arithmetic_intensity and
achieved_tflops, through the ncu_roofline view), and derives a point only for a run that
predates those fields, saying so."""

from __future__ import annotations

import json

import pytest

from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.contract.bundle import NCU_FILE
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import open_page, plotly_specs, texts

SHAPE = SHAPES[0]
STORED = case_id("sdpa", SHAPE.id, "fp16", True)
OLD = case_id("sdpa", SHAPE.id, "fp16", False)


@pytest.fixture(scope="module")
def roofline_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("roofline")
    bundle = make_bundle(work / "b", run_id="profiled", variants=("sdpa",), shapes=(SHAPE,), with_ncu=True)
    path = bundle / NCU_FILE
    document = json.loads(path.read_text())
    for case in document["cases"]:
        if case["case_id"] == STORED:
            # Stored by CI; deliberately not FLOPs / dram_bytes, so a recomputation would show.
            case.update(dram_bytes=1e6, arithmetic_intensity=123.0, achieved_tflops=45.0, peak_tflops=666.5904706742397,
                        pct_of_peak=100 * 45.0 / 666.5904706742397)
        else:
            # As a bundle written before CI stored the roofline inputs.
            for name in ("memory_throughput_pct", "dram_bytes_ideal", "arithmetic_intensity", "peak_tflops", "pct_of_peak"):
                case.pop(name)
            case.update(dram_bytes=4e6, achieved_tflops=None, duration_us=20.0)
    path.write_text(json.dumps(document, allow_nan=False))
    db = work / "history.duckdb"
    ingest_paths(db, [bundle])
    return db


def test_kernel_roofline_draws_stored_values_and_derives_only_for_old_rows(roofline_history, monkeypatch):
    at = open_page(roofline_history, monkeypatch, "views/kernel.py", variant="sdpa")
    roofline = next(s for s in plotly_specs(at) if s["layout"].get("xaxis", {}).get("type") == "log")
    points = {t["name"]: (t["x"][0], t["y"][0]) for t in roofline["data"][1:]}
    assert points["sdpa · fp16 · causal"] == (123.0, 45.0)  # exactly what CI stored
    flops = SHAPE.flops(False)
    x, y = points["sdpa · fp16"]
    assert x == pytest.approx(flops / 4e6) and y == pytest.approx(flops / 20e-6 / 1e12)
    caption = next(c for c in texts(at, "caption") if "Points:" in c)
    assert "2 value(s) from runs that predate those fields are derived" in caption
    assert "h200_sdpa_backends.json" in caption


def test_roofline_says_why_it_cannot_draw(tmp_path, monkeypatch):
    """Profiled without DRAM bytes on a GPU with ceilings, and profiled on a GPU without any:
    each gets its own reason, never an empty chart or silence."""
    no_bytes = make_bundle(tmp_path / "a", run_id="no-bytes", variants=("sdpa",), shapes=(SHAPE,), with_ncu=True)
    l4 = make_bundle(tmp_path / "b", run_id="l4", variants=("sdpa",), shapes=(SHAPE,), with_ncu=True, gpu_name="NVIDIA L4")
    db = tmp_path / "history.duckdb"
    ingest_paths(db, [no_bytes, l4])
    at = open_page(db, monkeypatch, "views/kernel.py", gpu="NVIDIA H200", variant="sdpa")
    (why,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No DRAM bytes" in why and "2 profiled case(s)" in why and "No ceilings" not in why
    at = open_page(db, monkeypatch, "views/kernel.py", gpu="NVIDIA L4", variant="sdpa")
    (why,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No ceilings for this GPU" in why and "NVIDIA L4 (fp16)" in why
    assert "measured so far:" in why and "NVIDIA H200" in why
    assert "No DRAM bytes" in why
    assert not [s for s in plotly_specs(at) if s["layout"].get("xaxis", {}).get("type") == "log"]
