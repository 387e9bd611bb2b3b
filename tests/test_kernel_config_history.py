"""The kernel configuration of each result in the history: stored, queryable, and absent (NULL)
for older bundles and histories, which still ingest (case_timing v1, migration 006)."""

from __future__ import annotations

import json

import duckdb

from bundle_factory import make_bundle
from attnwatch.history.ingest.write import ingest_paths
from old_history import history_at_version
from attnwatch.history.store.location import parse_location


def _rows(db_path, sql):
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_every_triton_result_stores_its_configuration_and_the_views_show_it(tmp_path, db_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", variants=("sdpa", "triton_fa2"))])
    rows = _rows(db_path, "SELECT variant, kernel_config, kernel_config_source FROM result_details ORDER BY case_id")
    triton = [r for r in rows if r[0] == "triton_fa2"]
    assert triton and all(r[1:] == ("m64_n64_w4_s3", "table") for r in triton)
    assert all(r[1:] == (None, None) for r in rows if r[0] == "sdpa")  # reports none
    assert _rows(db_path, "SELECT count(kernel_config) FROM case_series WHERE variant = 'triton_fa2'")[0][0] == len(
        triton
    )


def _as_case_timing_v1(bundle):
    path = bundle / "timings.json"
    document = json.loads(path.read_text())
    for timing in document["timings"]:
        timing.pop("kernel_config"), timing.pop("kernel_config_source")
        timing["schema_version"] = 1
    path.write_text(json.dumps(document))


def test_a_bundle_written_before_the_field_ingests_with_no_configuration(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "old", variants=("sdpa", "triton_fa2"))
    _as_case_timing_v1(bundle)
    ingest_paths(parse_location(db_path), [bundle])
    rows = _rows(db_path, "SELECT kernel_config, kernel_config_source, median_us FROM results")
    assert rows and all(r[0] is None and r[1] is None and r[2] > 0 for r in rows)


def test_a_history_at_migration_6_upgrades_and_keeps_its_results(tmp_path):
    db_path = tmp_path / "old.duckdb"
    history_at_version(db_path, 6, tmp_path / "scratch")
    con = duckdb.connect(str(db_path))
    try:
        columns = {r[0] for r in con.execute("DESCRIBE results").fetchall()}
    finally:
        con.close()
    assert "kernel_config" not in columns
    ingest_paths(
        parse_location(db_path), [make_bundle(tmp_path / "b", variants=("triton_fa2",))]
    )  # migrates to 7 first
    assert {r[0] for r in _rows(db_path, "SELECT kernel_config FROM results")} == {"m64_n64_w4_s3"}
    assert "config_change" in {r[0] for r in _rows(db_path, "DESCRIBE alerts")}
