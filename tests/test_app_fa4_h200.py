"""A real H200 run of the FA-paper grid (fp16; fa4_sm90 beside sdpa, sdpa_flash, sdpa_cudnn;
tests/data/bundles/h200-fa4-fa-grid-fp16-86302dc.tgz, a format-2 bundle) ingested into a real
DuckDB file: the dashboard's Trends data layer and page show fa4_sm90's series with its H200
medians, its gap to the baseline (sdpa) and its gap to the fastest reference, each as stored;
and the run page shows the optional packages a format-3 run recorded."""

from __future__ import annotations

import json
import tarfile

import pytest

from bundle_factory import make_bundle
from attnwatch.app.data import trends
from attnwatch.app.data.store import current_source
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import frame_with, open_page, trend_charts, trend_points
from attnwatch.history.store.location import parse_location

BUNDLE = "h200-fa4-fa-grid-fp16-86302dc"
GPU = "NVIDIA H200"
SHAPES = ("fa_s512_d64", "fa_s4096_d128")
VARIANTS = ("fa4_sm90", "sdpa")


def recorded_history(work, fixtures_dir, name: str):
    """tests/data/bundles/<name>.tgz unpacked in `work` and ingested into a new history file there:
    (the history's path, case id -> the bundle's own timing record, the bundle folder)."""
    with tarfile.open(fixtures_dir / "bundles" / f"{name}.tgz") as archive:
        archive.extractall(work, filter="data")
    bundle = work / name
    stored = {t["case_id"]: t for t in json.loads((bundle / "timings.json").read_text())["timings"]}
    db = work / "history.duckdb"
    ingest_paths(parse_location(db), [bundle])
    return db, stored, bundle


@pytest.fixture(scope="module")
def h200(tmp_path_factory, fixtures_dir):
    db, stored, _ = recorded_history(tmp_path_factory.mktemp("fa4_h200"), fixtures_dir, BUNDLE)
    return db, stored


def _label(column: str) -> str:
    return trends.METRIC_BY_COLUMN[column]


@pytest.mark.parametrize("causal", (False, True))
def test_the_trend_data_has_fa4_sm90_with_its_h200_medians_and_gaps(h200, causal):
    db, stored = h200
    source = current_source(str(db))
    mode = "causal" if causal else "noncausal"
    for column in ("median_us", "gap_to_baseline", "gap_to_fastest_reference"):
        frame = trends.trend_series(source, _label(column), GPU, "main", VARIANTS, SHAPES, "fp16", causal)
        values = dict(zip(frame["case_id"], frame["value"]))
        wanted = {f"{v}/{s}/fp16/{mode}" for v in VARIANTS for s in SHAPES}
        assert set(values) == wanted, column
        for case, value in values.items():
            assert value == pytest.approx(stored[case][column], rel=1e-12), (case, column)
    fa4 = stored[f"fa4_sm90/fa_s4096_d128/fp16/{mode}"]
    assert fa4["baseline_variant"] == "sdpa" and fa4["gap_to_baseline"] < 1  # faster than sdpa at S=4096, d=128
    small = stored[f"fa4_sm90/fa_s512_d64/fp16/{mode}"]
    assert small["fastest_reference"] == "sdpa_cudnn" and small["gap_to_fastest_reference"] > 1.1


def test_the_trends_page_plots_fa4_sm90_against_sdpa_on_the_h200(h200, monkeypatch):
    db, stored = h200
    noncausal = {
        "fa4_sm90": stored["fa4_sm90/fa_s4096_d128/fp16/noncausal"],
        "sdpa": stored["sdpa/fa_s4096_d128/fp16/noncausal"],
    }
    assert noncausal["fa4_sm90"]["median_us"] == pytest.approx(811.392, abs=1e-3)  # the recording itself
    for column in ("median_us", "gap_to_baseline", "gap_to_fastest_reference"):
        at = open_page(
            db,
            monkeypatch,
            "views/trends.py",
            gpu=GPU,
            variants=",".join(VARIANTS),
            shapes="fa_s4096_d128",
            dtype="fp16",
            causal="0",
            metric=column,
        )
        (spec,) = trend_charts(at)
        points = trend_points(spec)
        lines = {name.split(" · ")[0]: list(trend_points(spec, name)["value"]) for name in set(points["series"])}
        assert set(lines) == set(VARIANTS), column
        for variant, ys in lines.items():
            assert ys == [pytest.approx(noncausal[variant][column], rel=1e-9)], (variant, column)


def test_the_run_page_shows_the_packages_a_run_recorded(tmp_path, monkeypatch):
    packages = {"flash-attn-4": "4.0.0b4", "liger-kernel": None, "nvidia-cutlass-dsl": "4.3.0", "quack-kernels": None}
    db = tmp_path / "history.duckdb"
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                tmp_path / "b",
                run_id="with-packages",
                variants=("sdpa",),
                n_samples=5,
                environment={"packages": packages},
            )
        ],
    )
    at = open_page(db, monkeypatch, "views/run.py", run="with-packages")
    environment = frame_with(at, "value")
    assert json.loads(environment.loc["packages", "value"]) == packages
