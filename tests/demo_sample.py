"""The shipped H200 sample history (docs/data/demo, what `make demo` ingests) in a test's history:
real measurements with a real build change and real ncu counters behind the newest push
(cuda_wmma: registers/thread 157 → 128 with spills), and the Triton step detection alerts on."""

from __future__ import annotations

import tarfile
from pathlib import Path

from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.detection.alerts import record_alerts
from attnwatch.history.detection.scan import scan_history
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.db import open_write
from attnwatch.history.store.location import parse_location

DEMO_HISTORY = Path(__file__).resolve().parents[1] / "docs" / "data" / "demo" / "h200-demo-history.tgz"
H200 = "NVIDIA H200"
PUSH_HEAD = "2f4b244b1a"  # the newest commit: cuda_wmma's launch bounds asked for 4 CTAs per SM


def build_demo_history(db: Path, work: Path) -> Path:
    """Ingest the sample's eight runs into `db` and run detection, as `make demo` does."""
    with tarfile.open(DEMO_HISTORY) as tar:
        tar.extractall(work, filter="data")
    ingest_paths(parse_location(db), sorted((work / "h200-demo-history").iterdir()))
    with open_write(parse_location(db)) as con:  # what `attnwatch detect` does
        record_alerts(con, scan_history(con, load_thresholds).findings)
    return db
