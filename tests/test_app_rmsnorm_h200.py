"""A real H200 `attnwatch run` of the RMSNorm operator (its four variants on the main shapes,
fp16 and bf16; tests/data/bundles/h200-rmsnorm-main-20261126.tgz, a format-3 bundle: the code
of commit 68e23a3; its manifest says 39e1931, the commit the git metadata of that checkout named; liger-kernel
and quack-kernels from a `pip --target` folder named in ATTNWATCH_EXTRA_SITE) ingested into a
real DuckDB file: the Trends data layer shows each variant's series with its H200 medians and
its gaps to the baseline (rmsnorm_torch) and to the fastest reference, each as stored; the
Kernel page draws the memory-bound roofline (bytes of the byte model over the median) under the
H200's measured copy bandwidth; the run page shows the optional packages the run recorded; and
the Run, Overview and Compare pages offer every RMSNorm case the command that measures it again
(history.reproduce)."""

from __future__ import annotations

import json
import shutil

import pytest

from attnwatch.app.data import trends
from attnwatch.app.data.store import current_source
from attnwatch.history.analysis.ceilings import find_ceiling
from attnwatch.history.reproduce import DIRTY_NOTE
from attnwatch.history.ingest.write import ingest_paths
from test_app_fa4_h200 import recorded_history
from svg_charts import role, series, svg_images
from test_app_pages import frame_with, open_page
from attnwatch.history.store.location import parse_location

BUNDLE = "h200-rmsnorm-main-20261126"
GPU = "NVIDIA H200"
VARIANTS = ("rmsnorm_torch", "rmsnorm_triton", "rmsnorm_liger", "rmsnorm_quack")
SHAPES = ("rms_t4k_h2048", "rms_t8k_h8192")


@pytest.fixture(scope="module")
def h200(tmp_path_factory, fixtures_dir):
    return recorded_history(tmp_path_factory.mktemp("rmsnorm_h200"), fixtures_dir, BUNDLE)


def test_the_recording_has_every_variant_timed_and_correct(h200):
    _, stored, bundle = h200
    assert len(stored) == 32 and {t["variant"] for t in stored.values()} == set(VARIANTS)
    assert all(t["operator"] == "rmsnorm" and t["bound"] == "memory" for t in stored.values())
    records = json.loads((bundle / "correctness.json").read_text())["records"]
    assert len(records) == 96 and all(r["passed"] for r in records)  # 32 cases x 3 seeds
    assert {r["case_id"] for r in records} == set(stored)


@pytest.mark.parametrize("dtype", ("fp16", "bf16"))
def test_the_trend_data_has_each_variant_with_its_h200_medians_and_gaps(h200, dtype):
    db, stored, _ = h200
    source = current_source(str(db))
    for column in ("median_us", "gap_to_baseline", "gap_to_fastest_reference"):
        frame = trends.trend_series(
            source, trends.METRIC_BY_COLUMN[column], GPU, "main", VARIANTS, SHAPES, dtype, False
        )
        values = dict(zip(frame["case_id"], frame["value"]))
        assert set(values) == {f"{v}/{s}/{dtype}/fwd" for v in VARIANTS for s in SHAPES}, column
        for case, value in values.items():
            assert value == pytest.approx(stored[case][column], rel=1e-12), (case, column)
    ours = stored[f"rmsnorm_triton/rms_t8k_h8192/{dtype}/fwd"]
    assert ours["baseline_variant"] == "rmsnorm_torch" and ours["gap_to_baseline"] < 0.75  # the recording itself


def test_the_kernel_page_draws_the_bandwidth_roofline_under_the_measured_copy_bandwidth(h200, monkeypatch):
    db, stored, _ = h200
    at = open_page(db, monkeypatch, "views/kernel.py", variant="rmsnorm_triton")
    (chart,) = [c for c in svg_images(at) if "TB/s" in c.get("data-y-title", "")]
    roof = find_ceiling(GPU, "copy_tbps", "any")
    (ceiling,) = role(chart, "roof")
    assert float(ceiling.get("data-value")) == pytest.approx(roof.value)
    points = {
        name: {p.get("data-x"): float(p.get("data-value")) for p in marks} for name, marks in series(chart).items()
    }
    for label, by_shape in points.items():
        variant, dtype, mode = label.split(" · ")
        for shape, tbps in by_shape.items():
            timing = stored[f"{variant}/{shape}/{dtype}/{mode}"]
            assert tbps == pytest.approx(timing["bytes"] / timing["median_us"] / 1e6, rel=1e-9)
            assert 0 < tbps < roof.value  # under the measured roof, never over it
    assert "rmsnorm_triton · fp16 · fwd" in points


def test_the_run_page_shows_the_packages_the_h200_run_recorded(h200, monkeypatch):
    db, _, bundle = h200
    manifest = json.loads((bundle / "manifest.json").read_text())
    at = open_page(db, monkeypatch, "views/run.py", run=manifest["run_id"])
    packages = json.loads(frame_with(at, "value").loc["packages", "value"])
    assert packages == {
        "flash-attn-4": "4.0.0b36",
        "liger-kernel": "0.8.5",
        "nvidia-cutlass-dsl": "4.8.1",
        "quack-kernels": "0.6.5",
    }


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, fixtures_dir):
    """The recording, and a copy of it as the next main run of another commit (same timings):
    (history, first run's manifest, second run's manifest)."""
    work = tmp_path_factory.mktemp("rmsnorm_h200_two")
    db, _, bundle = recorded_history(work, fixtures_dir, BUNDLE)
    first = json.loads((bundle / "manifest.json").read_text())
    copy = shutil.copytree(bundle, work / "next")
    second = {
        **first,
        "run_id": first["run_id"] + "-next",
        "commit_sha": "e" * 40,
        "parent_sha": first["commit_sha"],
        "started_at": "2026-11-26T17:00:00Z",
        "finished_at": "2026-11-26T17:01:00Z",
    }
    (copy / "manifest.json").write_text(json.dumps(second))
    ingest_paths(parse_location(db), [copy])
    return db, first, second


def test_the_run_and_overview_pages_offer_each_rmsnorm_case_its_command(two_runs, monkeypatch):
    """`git checkout --detach SHA && attnwatch run` naming the case's shape, variant and dtype:
    RMSNorm runs in its one mode, so no mode flag (tests/test_reproduce.py plans it)."""
    db, first, second = two_runs
    assert first["dirty"] is True  # the recorded run's checkout was dirty
    page = open_page(db, monkeypatch, "views/run.py", run=first["run_id"])
    assert any("uncommitted changes" in w.value for w in page.warning)
    run = frame_with(page, "measure_again")
    overview = frame_with(open_page(db, monkeypatch, "views/overview.py"), "measure_again")
    for table, sha in ((run, first["commit_sha"]), (overview, second["commit_sha"])):
        assert len(table) == 32
        for case, command in zip(table["case_id"], table["measure_again"]):
            variant, shape, dtype, mode = case.split("/")
            assert mode == "fwd" and command == (
                f"git checkout --detach {sha} && "
                f"attnwatch run --shapes {shape} --variants {variant} --dtypes {dtype}" + DIRTY_NOTE
            )  # the recorded bundle's tree was dirty


def test_the_compare_page_offers_each_rmsnorm_case_the_ab_of_both_commits(two_runs, monkeypatch):
    db, first, second = two_runs
    at = open_page(db, monkeypatch, "views/compare.py", base=first["run_id"], head=second["run_id"])
    table = frame_with(at, "measure_again")
    assert len(table) == 32
    for case, command in zip(table["case_id"], table["measure_again"]):
        variant, shape, dtype, _ = case.split("/")
        assert command == (
            f"attnwatch compare --base {first['commit_sha']} --head {second['commit_sha']} "
            f"--shapes {shape} --variants {variant} --dtypes {dtype}" + DIRTY_NOTE
        )
