"""The Kernel page on a history whose device is a CPU (issue 44): nothing on it calls that
device a GPU. A CPU main run (wall-clock timed, no build report, no ncu metrics, no measured
ceilings) ingested as production does; the page says why it has no roofline for "this device"."""

from __future__ import annotations

import pytest

from bundle_factory import SHAPES, case_id, make_bundle
from attnwatch.history.ingest.write import ingest_paths
from test_app_overview_devices import CPU_ENV
from test_app_pages import open_page, texts
from attnwatch.history.store.location import parse_location

VARIANTS = ("sdpa", "torch_3op")


@pytest.fixture(scope="module")
def cpu_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("kernel_cpu")
    db = work / "history.duckdb"
    cases = [case_id(v, s.id, "fp16", c) for v in VARIANTS for s in SHAPES[:2] for c in (False, True)]
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                work / "cpu",
                run_id="cpu-main-0",
                variants=VARIANTS,
                seed=3,
                environment=CPU_ENV,
                latency_scale=20000.0,
                timing_overrides={c: {"timing_mode": "cpu_wall"} for c in cases},
                with_builds=False,
            )
        ],
    )
    return db


def test_kernel_page_on_a_cpu_run_calls_it_a_device_not_a_gpu(cpu_history, monkeypatch):
    at = open_page(cpu_history, monkeypatch, "views/kernel.py", gpu="cpu", variant="sdpa")
    (why,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No ceilings for this device" in why and "for cpu (fp16)" in why, why
    said = [t for kind in ("info", "warning", "caption", "markdown", "error") for t in texts(at, kind)]
    assert said and not [t for t in said if "this GPU" in t or "GPU's" in t], said
