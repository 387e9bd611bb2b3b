"""The Trends chart shows each point's kernel configuration on hover and marks the runs where it
changed (a real Streamlit app on a real history)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd

from attnwatch.app.charts import config_changes
from bundle_factory import make_bundle
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import open_page, trend_charts, trend_marks, trend_points
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)


def test_hover_names_the_configuration_and_a_change_is_marked(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    paths = [
        make_bundle(
            tmp_path / f"b{i}",
            run_id=f"run-{i}",
            commit_sha=f"{i:040x}",
            seed=i,
            started_at=T0 + timedelta(hours=i),
            commit_date=T0 + timedelta(hours=i),
            variants=("sdpa", "triton_fa2"),
            kernel_configs={"triton_fa2": "m64_n128_w4_s3" if i >= 3 else "m64_n64_w4_s3"},
        )
        for i in range(5)
    ]
    ingest_paths(parse_location(db), paths)
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu="NVIDIA H200",
        variants="triton_fa2,sdpa",
        shapes="l4_mission",
        dtype="fp16",
        causal="0",
    )
    (spec,) = trend_charts(at)
    names = set(trend_points(spec)["series"])
    triton = trend_points(spec, next(n for n in names if n.startswith("triton_fa2")))
    sdpa = trend_points(spec, next(n for n in names if n.startswith("sdpa")))
    assert {"field": "notes", "type": "nominal", "title": "notes"} in spec["layers"]["points"]["encoding"]["tooltip"]
    assert (
        list(triton["notes"].str.split(" · ").str[0])
        == ["config m64_n64_w4_s3 (table)"] * 3 + ["config m64_n128_w4_s3 (table)"] * 2
    )
    assert not any("config" in n for n in sdpa["notes"])  # SDPA reports no configuration
    (marker,) = trend_marks(spec, "kernel config changed").to_dict("records")
    assert marker["run_id"] == "run-3"
    assert "autotuner chose m64_n128_w4_s3 instead of m64_n64_w4_s3" in marker["label"]


def test_a_run_without_a_recorded_configuration_is_not_a_change():
    frame = pd.DataFrame(
        {
            "series": ["a"] * 4,
            "x": list("pqrs"),
            "x_order": range(4),
            "value": [1.0] * 4,
            "run_id": ["r0", "r1", "r2", "r3"],
            "kernel_config": ["k1", None, "k1", "k2"],
        }
    )
    changes = config_changes(frame)
    assert changes["run_id"].tolist() == ["r3"]
    assert changes["label"].iloc[0] == "a: autotuner chose k2 instead of k1"
