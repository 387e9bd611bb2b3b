"""Overview on the devices and cases a newcomer meets first (issue 26): a CPU run timed by wall
clock, cases that never produced a number, a +10% change beside unchanged noisy rows, and a
history whose regressions raised one alert per metric. Real bundles, real DuckDB, AppTest."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest

from app_history import H200, START
from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.detection.alerts import list_alerts, record_alerts
from attnwatch.history.detection.scan import scan_history
from attnwatch.history.store.db import open_write
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import frame_with, open_page, trend_charts
from attnwatch.history.store.location import parse_location

CPU_VARIANTS = ("sdpa", "torch_3op", "triton_fa2")
UNSUPPORTED = case_id("triton_fa2", SHAPES[0].id, "fp16", False)
MOVED = ("triton_fa2", 1.10)  # +10% in the newest H200 run, no alert (detection not run)
NOISY = case_id("sdpa_flash", SHAPES[1].id, "fp16", True)  # unchanged, marked unconverged
GPU_VARIANTS = ("sdpa", "sdpa_flash", "triton_fa2", "cuda_wmma")
CPU_ENV = {
    "device_kind": "cpu",
    "gpu_name": None,
    "gpu_uuid": None,
    "gpu_count": 0,
    "compute_capability": None,
    "sm_count": None,
    "l2_bytes": None,
    "driver_version": None,
    "cuda_version": None,
    "sm_clock_mhz": None,
    "sm_clock_max_mhz": None,
    "cupy_version": None,
    "nvcc_version": None,
}


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
        bundles.append(
            make_bundle(
                work / f"cpu-{i}",
                run_id=f"cpu-main-{i}",
                variants=CPU_VARIANTS,
                seed=10 + i,
                environment=CPU_ENV,
                timing_overrides=cpu_timing,
                statuses={UNSUPPORTED: "skipped"},
                started_at=START + timedelta(hours=i),
                with_builds=False,
            )
        )
        bundles.append(
            make_bundle(
                work / f"gpu-{i}",
                run_id=f"h200-main-{i}",
                variants=GPU_VARIANTS,
                seed=20 + i,
                started_at=START + timedelta(hours=i, minutes=5),
                statuses={UNSUPPORTED: "skipped"},
                variant_scale=dict([MOVED]) if i == 1 else None,
                timing_overrides={NOISY: {"converged": False, "rel_spread": 0.0031}} if i == 1 else None,
            )
        )
    ingest_paths(parse_location(db), bundles)
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
    moved = cases.index[cases["variant"] == MOVED[0]][
        cases.loc[cases["variant"] == MOVED[0], "change_pct"] > 5
    ].tolist()
    noisy = int(cases.index[cases["case_id"] == NOISY][0])
    assert moved and max(moved) < noisy, cases[["case_id", "change_pct", "marks"]]
    assert cases.loc[noisy, "marks"] == "unconverged (50 samples, IQR/median 0.31%)"
    ordered = cases.loc[moved, "change_pct"].tolist()
    assert ordered == sorted(ordered, key=abs, reverse=True)


def test_overview_tiles_count_this_pushs_verdicts_not_open_alerts(tmp_path, monkeypatch):
    """The newest run's regressions and improvements are This push's (issue 44): an open alert of
    an older step is listed under the table, never counted as this run's regression."""
    from attnwatch.app.data.push import push_changes
    from attnwatch.app.data.store import current_source

    work = tmp_path
    db = work / "history.duckdb"
    # Eight runs: triton_fa2 10% slower from run 5 on (detection alerts it); in the newest run
    # cuda_wmma 12% slower and sdpa_flash 12% faster, which no alert names yet.
    bundles = [
        make_bundle(
            work / f"gpu-{i}",
            run_id=f"h200-main-{i}",
            variants=GPU_VARIANTS,
            seed=30 + i,
            started_at=START + timedelta(hours=i),
            variant_scale={
                **({"triton_fa2": 1.10} if i >= 5 else {}),
                **({"cuda_wmma": 1.12, "sdpa_flash": 0.88} if i == 7 else {}),
            },
        )
        for i in range(8)
    ]
    ingest_paths(parse_location(db), bundles)
    with open_write(parse_location(db)) as con:  # what `attnwatch detect` does after a main ingest
        record_alerts(con, scan_history(con, load_thresholds).findings)
    opened = {
        a.case_id
        for a in list_alerts(parse_location(db), {"limit": 1000})
        if a.kind == "regression" and a.status == "open"
    }
    assert opened and all("triton_fa2" in c for c in opened)
    changes = push_changes(current_source(db))
    expected = {k: int((changes["section"] == k).sum()) for k in ("regression", "improvement")}
    assert expected == {"regression": 4, "improvement": 4}, expected
    at = open_page(db, monkeypatch, "views/overview.py", gpu=H200)
    shown = {m.label: m.value for m in at.metric}
    assert shown["regressions"] == str(expected["regression"]) and shown["improvements"] == str(expected["improvement"])
    cases = frame_with(at, "trend_us").reset_index(drop=True)
    assert set(cases["variant"].iloc[:4]) == {"cuda_wmma"}, cases[["case_id", "verdict", "change_pct"]]
    assert any(f"regression alert(s) on {len(opened)} case(s)" in m.value for m in at.markdown)


def test_trends_and_run_label_a_cpu_run_by_its_wall_clock(devices_history, monkeypatch):
    at = open_page(devices_history, monkeypatch, "views/trends.py", gpu="cpu", variants="sdpa", shapes=SHAPES[0].id)
    (spec,) = trend_charts(at)
    title = spec["layers"]["lines"]["encoding"]["y"]["title"]
    assert "CPU wall clock" in title and "CUDA" not in title and "event" not in title
    at = open_page(devices_history, monkeypatch, "views/run.py", run="cpu-main-1")
    labels = {k: v.get("label", "") for k, v in column_config(at, "correctness").items()}
    assert "CPU wall clock" in labels["median_us"] and not any("events" in label for label in labels.values()), labels
    at = open_page(devices_history, monkeypatch, "views/trends.py", gpu=H200, variants="sdpa", shapes=SHAPES[0].id)
    (spec,) = trend_charts(at)
    assert "CUDA events" in spec["layers"]["lines"]["encoding"]["y"]["title"]


LONG_VARIANT = "cutlass_3k_64x128x64_persistent"  # a real variant name, skipped on a CPU as it is in the demo


@pytest.fixture(scope="module")
def one_cpu_run(tmp_path_factory):
    """One CPU main run timed by wall clock at CPU speed (TFLOPS well under 1), where a variant
    with a long name needs a GPU and is skipped on every case."""
    work = tmp_path_factory.mktemp("one_cpu_run")
    db = work / "history.duckdb"
    variants = ("sdpa", "torch_3op", LONG_VARIANT)
    skipped = {c: "skipped" for c in _all_cases((LONG_VARIANT,))}
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                work / "cpu",
                run_id="cpu-main-0",
                variants=variants,
                seed=3,
                environment=CPU_ENV,
                latency_scale=20000.0,
                timing_overrides={c: {"timing_mode": "cpu_wall"} for c in _all_cases(variants)},
                statuses=skipped,
                started_at=START,
                with_builds=False,
            )
        ],
    )
    return db


def test_overview_on_a_cpu_run_leads_with_measured_rows_and_shows_their_figures(one_cpu_run, monkeypatch):
    """Issue 44: measured rows above the 'not run' ones; TFLOPS of a CPU run (0.0x) not written 0.0;
    a long variant name not cut; the one run's trend drawn as one dot, not a line."""
    at = open_page(one_cpu_run, monkeypatch, "views/overview.py", gpu="cpu")
    cases = frame_with(at, "trend_us").reset_index(drop=True)
    measured = cases.index[cases["status"] == "ok"].tolist()
    assert measured == list(range(len(measured))), cases[["case_id", "status"]]
    config = column_config(at, "trend_us")
    tflops = cases["tflops"].dropna()
    assert 0 < tflops.min() < 0.05, tflops
    smallest = config["tflops"]["type_config"]["format"] % tflops.min()
    assert float(smallest) > 0 and len(smallest.rstrip("0").split(".")[1]) >= 2, smallest
    assert config["variant"]["width"] >= 195 + 2 * 8  # the name's width in the grid's font (Chromium) + padding
    svg = base64.b64decode(cases.loc[measured[0], "trend_svg"].split(",", 1)[1]).decode()
    assert svg.count("<circle") == 1 and "<polyline" not in svg, svg
    assert cases.loc[cases["status"] == "skipped", "trend_svg"].isna().all()


def test_this_push_labels_each_side_by_the_timer_its_runs_stored(devices_history, monkeypatch):
    """This push's table of every change: the CPU pair's before/after are CPU wall-clock times and
    the H200 pair's CUDA-event times, so the headers name both, never "events" alone."""
    at = open_page(devices_history, monkeypatch, "views/push.py")
    for toggle in at.toggle:
        if toggle.key and toggle.key.endswith("_table"):
            toggle.set_value(True)
    at = at.run()
    tables = [d for d in at.dataframe if "base_us" in d.value.columns]
    labelled = [
        ({k: v.get("label", "") for k, v in json.loads(d.proto.columns).items()}, set(d.value["gpu"])) for d in tables
    ]
    cpu = [labels for labels, gpus in labelled if gpus == {"cpu"}]
    h200 = [labels for labels, gpus in labelled if gpus == {H200}]
    mixed = [labels for labels, gpus in labelled if len(gpus) > 1]
    assert h200 and (cpu or mixed), [gpus for _, gpus in labelled]
    for labels in cpu:
        assert labels["base_us"] == "before µs (CPU wall clock)" and labels["head_us"] == "after µs (CPU wall clock)"
    for labels in h200:
        assert labels["base_us"] == "before µs (events)" and labels["head_us"] == "after µs (events)"
    for labels in mixed:
        assert "CPU wall clock" in labels["base_us"] and "events" in labels["base_us"], labels
