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
from attnwatch.history.ingest.write import ingest_paths
from test_app_overview_devices import CPU_ENV
from test_app_pages import frame_with, open_page

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
        make_bundle(work / "base", run_id="h200-base", variants=VARIANTS, seed=1, commit_sha=BASE_SHA,
                    started_at=START, with_samples=False),
        make_bundle(work / "head", run_id="h200-head", variants=VARIANTS, seed=2, commit_sha=HEAD_SHA,
                    parent_sha=BASE_SHA, started_at=START + timedelta(hours=1), with_samples=False,
                    variant_scale={"triton_fa2": STEP}, incorrect=(WRONG,)),
    ]
    cpu_timing = {case_id(v, s.id, "fp16", c): {"timing_mode": "cpu_wall"}
                  for v in ("sdpa", "torch_3op") for s in SHAPES[:2] for c in (False, True)}
    bundles += [make_bundle(work / f"cpu-{i}", run_id=f"cpu-{i}", variants=("sdpa", "torch_3op"), seed=5 + i,
                            environment=CPU_ENV, timing_overrides=cpu_timing, started_at=START + timedelta(hours=i),
                            with_builds=False) for i in range(2)]
    ingest_paths(db, bundles)
    return db


def test_compare_by_commits_without_samples_shows_the_step_and_the_failure_first(no_sample_pair, monkeypatch):
    at = open_page(no_sample_pair, monkeypatch, "views/compare.py", gpu=H200, commits=f"{BASE_SHA[:7]}..{HEAD_SHA[:7]}")
    table = frame_with(at, "shown")
    assert table["shown"].iloc[0] == "correctness FAIL" and table["case_id"].iloc[0] == WRONG
    stepped = table[table["variant"] == "triton_fa2"]
    assert set(stepped["shown"]) == {"moved, no interval"}
    assert list(stepped.index) == list(range(1, 1 + len(stepped)))  # right after the failure
    counts = {m.label: m.value for m in at.metric}
    assert counts["moved, no interval"] == str(len(stepped)) and counts["correctness failures"] == "1"
    assert table.loc[table["case_id"] == WRONG, "verdict"].iloc[0] != "correctness FAIL"  # timing verdict kept beside it


@pytest.mark.parametrize("gpu, base, head, timer", [
    (H200, "h200-base", "h200-head", "events"),
    ("cpu", "cpu-0", "cpu-1", "CPU wall clock"),
])
def test_compare_labels_name_the_stored_timer(no_sample_pair, monkeypatch, gpu, base, head, timer):
    at = open_page(no_sample_pair, monkeypatch, "views/compare.py", gpu=gpu, base=base, head=head)
    table = next(d for d in at.dataframe if "shown" in d.value.columns)
    labels = {k: v.get("label", "") for k, v in json.loads(table.proto.columns).items()}
    assert labels["base_us"] == f"base µs ({timer})" and labels["head_tflops"] == f"head TFLOPS ({timer})"
    if timer != "events":
        assert not any("events" in label for label in labels.values()), labels
