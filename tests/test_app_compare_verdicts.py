"""Compare says what a reader must see first (issue 26): a head that fails its correctness check
reads FAIL whatever its timing did; runs without samples still show a planted step as 'moved,
no interval' (This push's ratio-only rule); rows come correctness first, then by the size of the
change; labels name the timer the runs stored. Real bundles, real DuckDB, AppTest."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from app_history import H200, START
from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.ingest.write import ingest_paths
from test_app_overview_devices import CPU_ENV
from test_app_pages import frame_with, open_page, texts
from attnwatch.history.store.location import parse_location

VARIANTS = ("sdpa", "sdpa_flash", "triton_fa2", "cuda_wmma")
WRONG = case_id("cuda_wmma", SHAPES[1].id, "fp16", False)  # times fine, fails its check in the head
STEP = 1.08  # triton_fa2 in the head, against a min_effect of a few percent
BASE_SHA, HEAD_SHA = "a" * 40, "b" * 40


@pytest.fixture(scope="module")
def no_sample_pair(tmp_path_factory):
    """Two main runs on one GPU without stored samples: the head has triton_fa2 8% slower and
    one case whose correctness check fails."""
    work = tmp_path_factory.mktemp("compare_verdicts")
    db = work / "history.duckdb"
    bundles = [
        make_bundle(
            work / "base",
            run_id="h200-base",
            variants=VARIANTS,
            seed=1,
            commit_sha=BASE_SHA,
            started_at=START,
            with_samples=False,
        ),
        make_bundle(
            work / "head",
            run_id="h200-head",
            variants=VARIANTS,
            seed=2,
            commit_sha=HEAD_SHA,
            parent_sha=BASE_SHA,
            started_at=START + timedelta(hours=1),
            with_samples=False,
            variant_scale={"triton_fa2": STEP},
            incorrect=(WRONG,),
        ),
    ]
    cpu_timing = {
        case_id(v, s.id, "fp16", c): {"timing_mode": "cpu_wall"}
        for v in ("sdpa", "torch_3op")
        for s in SHAPES[:2]
        for c in (False, True)
    }
    bundles += [
        make_bundle(
            work / f"cpu-{i}",
            run_id=f"cpu-{i}",
            variants=("sdpa", "torch_3op"),
            seed=5 + i,
            environment=CPU_ENV,
            timing_overrides=cpu_timing,
            started_at=START + timedelta(hours=i),
            with_builds=False,
        )
        for i in range(2)
    ]
    ingest_paths(parse_location(db), bundles)
    return db


def test_compare_by_commits_without_samples_shows_the_step_and_the_failure_first(no_sample_pair, monkeypatch):
    at = open_page(no_sample_pair, monkeypatch, "views/compare.py", gpu=H200, commits=f"{BASE_SHA[:7]}..{HEAD_SHA[:7]}")
    table = frame_with(at, "shown")
    assert table["shown"].iloc[0] == "correctness FAIL" and table["case_id"].iloc[0] == WRONG
    stepped = table[table["variant"] == "triton_fa2"]
    assert set(stepped["shown"]) == {"moved (no interval)"}
    assert list(stepped.index) == list(range(1, 1 + len(stepped)))  # right after the failure
    counts = {m.label: m.value for m in at.metric}
    assert counts["moved (no interval)"] == str(len(stepped)) and counts["correctness failures"] == "1"
    # 'regressions 0' beside an 8% step must not read as nothing slower (issue 44): said in words.
    assert counts["regressions"] == "0"
    (said,) = [w for w in texts(at, "warning") if "without an interval" in w]
    assert f"{len(stepped)} case(s) moved" in said and f"{len(stepped)} slower, 0 faster" in said, said
    assert (
        table.loc[table["case_id"] == WRONG, "verdict"].iloc[0] != "correctness FAIL"
    )  # timing verdict kept beside it


@pytest.mark.parametrize(
    "gpu, base, head, timer",
    [
        (H200, "h200-base", "h200-head", "events"),
        ("cpu", "cpu-0", "cpu-1", "CPU wall clock"),
    ],
)
def test_compare_labels_name_the_stored_timer(no_sample_pair, monkeypatch, gpu, base, head, timer):
    at = open_page(no_sample_pair, monkeypatch, "views/compare.py", gpu=gpu, base=base, head=head)
    table = next(d for d in at.dataframe if "shown" in d.value.columns)
    labels = {k: v.get("label", "") for k, v in json.loads(table.proto.columns).items()}
    assert labels["base_us"] == f"base µs ({timer})" and labels["head_tflops"] == f"head TFLOPS ({timer})"
    if timer != "events":
        assert not any("events" in label for label in labels.values()), labels


def _picker_options(at, label: str) -> list[str]:
    (box,) = [b for b in at.selectbox if b.label == label]
    return list(box.options)


@pytest.mark.parametrize("base, head", [("h200-base", "h200-head"), ("h200-base", "cpu-1")])
def test_compare_after_a_gpu_switch_uses_only_that_gpus_runs(no_sample_pair, monkeypatch, base, head):
    """Issue 44: a link (or the pickers' state) naming H200 runs with GPU cpu chosen compares cpu
    runs by cpu's rule: the other GPU's runs are dropped with a note, the pickers list cpu runs
    only, the URL forgets the dropped runs, and a mixed pair is never compared."""
    at = open_page(no_sample_pair, monkeypatch, "views/compare.py", gpu=H200, base=base, head=head)
    at.selectbox(key="compare_gpu").select("cpu").run()
    assert not at.exception
    assert any("Dropped run(s) of another device" in w and "h200-base" in w for w in texts(at, "warning"))
    for label in ("base", "head"):
        assert all(" · cpu-" in o or o.startswith("cpu-") for o in _picker_options(at, label)), _picker_options(
            at, label
        )
    table = frame_with(at, "shown")
    assert not any("mixed" in c.value for c in at.caption)
    assert set(table["shown"]) - {"no change", "within min_effect (no interval)", "moved (no interval)"} == set()
    assert {at.query_params.get("base"), at.query_params.get("head")} <= {None, "cpu-0", "cpu-1"}, dict(at.query_params)
    rule = next(c.value for c in at.caption if "Verdicts use CI's rule" in c.value)
    assert "rule for cpu" in rule and f"min_effect of {load_thresholds('cpu').min_effect:.1%}" in rule, rule
    labels = {
        k: v.get("label", "")
        for k, v in json.loads(next(d for d in at.dataframe if "shown" in d.value.columns).proto.columns).items()
    }
    assert labels["base_us"] == labels["head_us"].replace("head", "base") == "base µs (CPU wall clock)", labels
