"""The Kernel page's roofline draws what CI stored (ncu_cases.arithmetic_intensity and
achieved_tflops, through the ncu_roofline view), and derives a point only for a run that
predates those fields, saying so."""

from __future__ import annotations

import json

import pytest

from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.contract.bundle import NCU_FILE
from attnwatch.history.analysis.ceilings import find_ceiling
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.db import open_read
from svg_charts import charts_by_key, role, series, svg_images
from test_app_pages import open_page, texts, trend_charts, trend_points
from attnwatch.history.store.location import parse_location

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
            case.update(
                dram_bytes=1e6,
                arithmetic_intensity=123.0,
                achieved_tflops=45.0,
                peak_tflops=666.5904706742397,
                pct_of_peak=100 * 45.0 / 666.5904706742397,
            )
        else:
            # As a bundle written before CI stored the roofline inputs.
            for name in (
                "memory_throughput_pct",
                "dram_bytes_ideal",
                "arithmetic_intensity",
                "peak_tflops",
                "pct_of_peak",
            ):
                case.pop(name)
            case.update(dram_bytes=4e6, achieved_tflops=None, duration_us=20.0)
    path.write_text(json.dumps(document, allow_nan=False))
    db = work / "history.duckdb"
    ingest_paths(parse_location(db), [bundle])
    return db


def test_kernel_roofline_draws_stored_values_and_derives_only_for_old_rows(roofline_history, monkeypatch):
    at = open_page(roofline_history, monkeypatch, "views/kernel.py", variant="sdpa")
    roofline = charts_by_key(at)["roofline_chart"]
    assert roofline.get("data-x-type") == "log"
    points = {name: (float(p[0].get("data-x")), float(p[0].get("data-value"))) for name, p in series(roofline).items()}
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
    l4 = make_bundle(
        tmp_path / "b", run_id="l4", variants=("sdpa",), shapes=(SHAPE,), with_ncu=True, gpu_name="NVIDIA L4"
    )
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [no_bytes, l4])
    at = open_page(db, monkeypatch, "views/kernel.py", gpu="NVIDIA H200", variant="sdpa")
    (why,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No DRAM bytes" in why and "2 profiled case(s)" in why and "No ceilings" not in why
    at = open_page(db, monkeypatch, "views/kernel.py", gpu="NVIDIA L4", variant="sdpa")
    (why,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No ceilings for this device" in why and "NVIDIA L4 (fp16)" in why
    assert "measured so far:" in why and "NVIDIA H200" in why
    assert "No DRAM bytes" in why
    assert not [c for c in svg_images(at) if c.get("data-x-type") == "log"]


def test_a_memory_bound_operator_s_roofline_is_its_achieved_bandwidth_under_the_measured_copy_roof(
    tmp_path, monkeypatch
):
    """results.bound = 'memory': the Kernel page plots each case's stored bytes / stored median
    against the GPU's measured DRAM copy bandwidth (ceilings.toml), never the ncu FLOP roofline."""
    ids = [case_id("sdpa", SHAPE.id, "fp16", causal) for causal in (False, True)]
    overrides = {cid: {"bound": "memory", "bytes": 3e6 * (i + 1)} for i, cid in enumerate(ids)}
    bundle = make_bundle(
        tmp_path / "b", run_id="memory", variants=("sdpa",), shapes=(SHAPE,), timing_overrides=overrides
    )
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [bundle])
    with open_read(parse_location(db)) as con:
        medians = dict(con.execute("SELECT case_id, median_us FROM results").fetchall())
    at = open_page(db, monkeypatch, "views/kernel.py", variant="sdpa")
    chart = charts_by_key(at)["bandwidth_chart"]
    assert "bandwidth" in chart.get("data-y-title") and float(chart.get("data-y-min")) == 0  # from zero
    points = {name: float(p[0].get("data-value")) for name, p in series(chart).items()}
    assert points == {
        "sdpa · fp16 · noncausal": pytest.approx(3e6 / medians[ids[0]] / 1e6),
        "sdpa · fp16 · causal": pytest.approx(6e6 / medians[ids[1]] / 1e6),
    }
    (roof,) = role(chart, "roof")
    assert float(roof.get("data-value")) == find_ceiling("NVIDIA H200", "copy_tbps", "any").value
    assert roof.get("stroke-dasharray")  # the roof is dashed
    assert not [c for c in svg_images(at) if c.get("data-x-type") == "log"]
    assert any("memory-bound" in c for c in texts(at, "caption"))


def test_a_cpu_run_of_rmsnorm_is_stored_memory_bound_and_drawn_under_the_copy_roof(tmp_path, monkeypatch):
    """End to end: `attnwatch run` on the CPU (rmsnorm_triton under Triton's interpreter, as CI runs
    Triton without a GPU) stores RMSNorm's cases as operator rmsnorm, bound memory, with the byte
    model and the gap to rmsnorm_torch; the Kernel page plots rmsnorm_triton's achieved bandwidth
    and Trends its series.
    The CPU has no measured copy bandwidth in ceilings.toml: the test lends it one."""
    import os
    import subprocess
    import sys

    from attnwatch.history.analysis import ceilings as ceilings_module
    from attnwatch.kernels.rmsnorm.model import bytes_moved
    from attnwatch.kernels.rmsnorm.shapes import SHAPES as RMS_SHAPES

    db = tmp_path / "history.duckdb"
    env = {**os.environ, "TRITON_INTERPRET": "1", "GITHUB_REF_NAME": "main", "GITHUB_EVENT_NAME": "push"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "--db",
            str(db),
            "run",
            "--shapes",
            "rms_cpu_tiny",
            "--variants",
            "rmsnorm_torch,rmsnorm_triton",
            "--dtypes",
            "fp16",
            "--device",
            "cpu",
            "--time-cap",
            "0.3",
            "--max-samples",
            "30",
            "--out",
            str(tmp_path / "bundle"),
            "--ingest",
            "--no-progress",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with open_read(parse_location(db)) as con:
        rows = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT variant, operator, bound, bytes, baseline_variant, gap_to_baseline, median_us, status FROM results"
            ).fetchall()
        }
    expected_bytes = bytes_moved(RMS_SHAPES["rms_cpu_tiny"], "fp16", "fwd")
    torch_row, triton_row = rows["rmsnorm_torch"], rows["rmsnorm_triton"]
    assert triton_row[:4] == ("rmsnorm", "memory", expected_bytes, "rmsnorm_torch") and triton_row[-1] == "ok"
    assert triton_row[4] == pytest.approx(triton_row[5] / torch_row[5])

    lent = ceilings_module.Ceiling(
        gpu="cpu",
        kind="copy_tbps",
        dtype="any",
        value=0.05,
        how="lent by this test",
        measured="not measured: a test's stand-in",
    )
    shipped = ceilings_module.ceilings()
    monkeypatch.setattr(ceilings_module, "ceilings", lambda path=ceilings_module.CEILINGS_FILE: (*shipped, lent))
    at = open_page(db, monkeypatch, "views/kernel.py", gpu="cpu", variant="rmsnorm_triton")
    chart = charts_by_key(at)["bandwidth_chart"]
    points = {name: float(p[0].get("data-value")) for name, p in series(chart).items()}
    assert points == {"rmsnorm_triton · fp16 · fwd": pytest.approx(expected_bytes / triton_row[5] / 1e6)}
    (roof,) = role(chart, "roof")
    assert float(roof.get("data-value")) == 0.05
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu="cpu",
        variants="rmsnorm_triton,rmsnorm_torch",
        shapes="rms_cpu_tiny",
        dtype="fp16",
        causal="0",
    )
    (trend,) = trend_charts(at)
    lines = set(trend_points(trend)["series"])
    assert sorted(name.split(" ")[0] for name in lines) == ["rmsnorm_torch", "rmsnorm_triton"]
