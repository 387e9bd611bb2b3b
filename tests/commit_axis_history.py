"""A history whose short commit hashes look like numbers ('1380e60' reads as 1.38e63), for
the charts that put commits on x (Trends, Alerts, Kernel) and for Kernel's defaults.

10 main runs on an NVIDIA H200 an hour apart, commit i has the hash `{i+1}380e6{i}…`:
  - runs 0-1 profiled under ncu, without sdpa_efficient;
  - runs 2-9 add sdpa_efficient, 15% slower from run 6: detection's newest regression (the
    pages' focus) is on a variant with neither a build report nor ncu metrics;
  - cuda_wmma and triton_fa2 store a build report in every run.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from app_history import START
from bundle_factory import make_bundle
from attnwatch.history.detection.alerts import record_alerts
from attnwatch.history.store.db import open_write
from attnwatch.history.detection.scan import scan_history
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

RUNS = 10
STEP_RUN = 6
REGRESSED_VARIANT = "sdpa_efficient"
BUILT_VARIANTS = ("cuda_wmma", "triton_fa2")


def commit_sha(i: int) -> str:
    return f"{i + 1}380e6{i}" + "ab" * 16 + "a"


def build_commit_axis_history(db: Path, work: Path) -> Path:
    bundles = []
    for i in range(RUNS):
        variants = ("sdpa", "triton_fa2", "cuda_wmma") + ((REGRESSED_VARIANT,) if i >= 2 else ())
        bundles.append(
            make_bundle(
                work / f"run-{i}",
                run_id=f"h200-main-{i:02d}",
                variants=variants,
                seed=i,
                commit_sha=commit_sha(i),
                parent_sha=commit_sha(i - 1) if i else None,
                started_at=START + timedelta(hours=i),
                variant_scale={REGRESSED_VARIANT: 1.15} if i >= STEP_RUN else None,
                with_ncu=i < 2,
            )
        )
    ingest_paths(parse_location(db), bundles)
    with open_write(parse_location(db)) as con:
        record_alerts(con, scan_history(con, load_thresholds).findings)
    return db
