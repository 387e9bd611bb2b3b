"""Overview on the devices and cases a newcomer meets first (issue 26): a CPU run timed by wall
clock, cases that never produced a number, a +10% change beside unchanged noisy rows, and a
history whose regressions raised one alert per metric. Real bundles, real DuckDB, AppTest."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from app_history import H200, START, build_history
from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import frame_with, open_page, plotly_specs

CPU_VARIANTS = ("sdpa", "torch_3op", "triton_fa2")
UNSUPPORTED = case_id("triton_fa2", SHAPES[0].id, "fp16", False)
MOVED = ("triton_fa2", 1.10)  # +10% in the newest H200 run, no alert (detection not run)
NOISY = case_id("sdpa_flash", SHAPES[1].id, "fp16", True)  # unchanged, marked unconverged
GPU_VARIANTS = ("sdpa", "sdpa_flash", "triton_fa2", "cuda_wmma")
CPU_ENV = {"device_kind": "cpu", "gpu_name": None, "gpu_uuid": None, "gpu_count": 0, "compute_capability": None,
           "sm_count": None, "l2_bytes": None, "driver_version": None, "cuda_version": None, "sm_clock_mhz": None,
           "sm_clock_max_mhz": None, "cupy_version": None, "nvcc_version": None}


def _all_cases(variants):
    return [case_id(v, s.id, "fp16", c) for v in variants for s in SHAPES[:2] for c in (False, True)]


@pytest.fixture(scope="module")
def devices_history(tmp_path_factory):
    """Two CPU main runs (cpu_wall timing, one case unsupported) and two H200 main runs (the
    newest: triton_fa2 10% slower, NOISY unconverged, one case skipped as unsupported)."""
    work = tmp_path_factory.mktemp("devices")
    db = work / "history.duckdb"
    cpu_timing = {cid: {"timing_mode": "cpu_wall"} for cid in _all_cases(CPU_VARIANTS)}
    bundles = []
    for i in range(2):
        bundles.append(make_bundle(
            work / f"cpu-{i}", run_id=f"cpu-main-{i}", variants=CPU_VARIANTS, seed=10 + i,
            environment=CPU_ENV, timing_overrides=cpu_timing, statuses={UNSUPPORTED: "skipped"},
            started_at=START + timedelta(hours=i), with_builds=False))
        bundles.append(make_bundle(
            work / f"gpu-{i}", run_id=f"h200-main-{i}", variants=GPU_VARIANTS, seed=20 + i,
            started_at=START + timedelta(hours=i, minutes=5), statuses={UNSUPPORTED: "skipped"},
            variant_scale=dict([MOVED]) if i == 1 else None,
            timing_overrides={NOISY: {"converged": False, "rel_spread": 0.0031}} if i == 1 else None))
    ingest_paths(db, bundles)
    return db


def column_config(at, column: str) -> dict:
    """The column config of the table that has `column`: {column: {"label": ..., ...}}."""
    table = next(d for d in at.dataframe if column in d.value.columns)
    return json.loads(table.proto.columns)


def test_overview_draws_a_cpu_run_and_labels_its_wall_clock(devices_history, monkeypatch):
    at = open_page(devices_history, monkeypatch, "views/overview.py", gpu="cpu")
    cases = frame_with(at, "trend_us").set_index("case_id")
    assert cases.loc[UNSUPPORTED, "status"] == "skipped"
    labels = {k: v.get("label", "") for k, v in column_config(at, "trend_us").items()}
    assert "CPU wall clock" in labels["median_us"] and "CPU wall clock" in labels["tflops"]
    assert not any("events" in label for label in labels.values()), labels
    assert any("not GPU kernel figures" in c.value for c in at.caption)


def test_overview_draws_a_gpu_run_with_a_case_that_never_produced_a_number(devices_history, monkeypatch):
    at = open_page(devices_history, monkeypatch, "views/overview.py", gpu=H200)
    cases = frame_with(at, "trend_us")
    labels = {k: v.get("label", "") for k, v in column_config(at, "trend_us").items()}
    assert labels["median_us"] == "median µs (events)"
    assert "None" not in set(cases["marks"]) | set(cases["fastest_reference"]) | set(cases["error"])
    summary = frame_with(at, "cases_ok")
    assert "device" in summary.columns and "gpu" not in summary.columns and "cpu" in set(summary["device"])


def test_overview_puts_real_changes_above_unchanged_noise(devices_history, monkeypatch):
    at = open_page(devices_history, monkeypatch, "views/overview.py", gpu=H200)
    cases = frame_with(at, "trend_us").reset_index(drop=True)
    moved = cases.index[cases["variant"] == MOVED[0]][cases.loc[cases["variant"] == MOVED[0], "change_pct"] > 5].tolist()
    noisy = int(cases.index[cases["case_id"] == NOISY][0])
    assert moved and max(moved) < noisy, cases[["case_id", "change_pct", "marks"]]
    assert cases.loc[noisy, "marks"] == "unconverged (50 samples, IQR/median 0.31%)"
    ordered = cases.loc[moved, "change_pct"].tolist()
    assert ordered == sorted(ordered, key=abs, reverse=True)


def test_overview_counts_cases_with_open_regressions_not_alerts(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    build_history(db, tmp_path / "bundles")
    open_regressions = [a for a in list_alerts(db, {"limit": 1000})
                        if a.kind == "regression" and a.status == "open" and a.gpu_name == H200]
    cases = {a.case_id for a in open_regressions}
    assert len(open_regressions) > len(cases)  # latency and gap-to-SDPA alerts on each case
    at = open_page(db, monkeypatch, "views/overview.py", gpu=H200)
    shown = {m.label: m.value for m in at.metric}
    assert shown["regressed cases"] == str(len(cases))
    config = column_config(at, "alert_id")
    assert "%" in config["change_pct"]["type_config"]["format"]


def test_trends_and_run_label_a_cpu_run_by_its_wall_clock(devices_history, monkeypatch):
    at = open_page(devices_history, monkeypatch, "views/trends.py", gpu="cpu", variants="sdpa", shapes=SHAPES[0].id)
    (spec,) = plotly_specs(at)
    title = spec["layout"]["yaxis"]["title"]["text"]
    assert "CPU wall clock" in title and "CUDA" not in title and "event" not in title
    at = open_page(devices_history, monkeypatch, "views/run.py", run="cpu-main-1")
    labels = {k: v.get("label", "") for k, v in column_config(at, "correctness").items()}
    assert "CPU wall clock" in labels["median_us"] and not any("events" in label for label in labels.values()), labels
    at = open_page(devices_history, monkeypatch, "views/trends.py", gpu=H200, variants="sdpa", shapes=SHAPES[0].id)
    (spec,) = plotly_specs(at)
    assert "CUDA events" in spec["layout"]["yaxis"]["title"]["text"]
