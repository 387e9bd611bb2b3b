"""ncu roofline inputs in the history: CI's stored values land in ncu_cases, bundles written
before CI derived them still ingest (NULL), export/import keeps them, and migration 003's
`ncu_roofline` view prefers the stored values, deriving only where a row has none."""

from __future__ import annotations

import json

import pytest

from bundle_factory import make_bundle
from attnwatch.history.contract.bundle import NCU_FILE
from attnwatch.history.store.db import open_read
from attnwatch.history.store.exchange import export_history, import_history
from attnwatch.history.ingest.write import ingest_paths
from old_history import history_at_version
from attnwatch.history.store.location import parse_location

ROOFLINE_FIELDS = ("memory_throughput_pct", "dram_bytes_ideal", "arithmetic_intensity", "peak_tflops", "pct_of_peak")
CASE = "sdpa/l4_mission/fp16/causal"


def _edit_ncu_cases(bundle, edit) -> None:
    """Rewrite the bundle's ncu.json cases in place, as a producer of that version would have."""
    path = bundle / NCU_FILE
    document = json.loads(path.read_text())
    for index, case in enumerate(document["cases"]):
        edit(index, case)
    path.write_text(json.dumps(document, allow_nan=False))


def _with_roofline(index, case):
    case.update(
        memory_throughput_pct=70.0 + index,
        dram_bytes_ideal=1e6 * (index + 1),
        arithmetic_intensity=100.0 + index,
        peak_tflops=666.5904706742397,
        pct_of_peak=10.0 + index,
        dram_bytes=2e6 * (index + 1),
        achieved_tflops=50.0 + index,
    )


def _stored(db_path, run_id):
    with open_read(parse_location(db_path)) as con:
        return con.execute(
            f"SELECT case_id, {', '.join(ROOFLINE_FIELDS)} FROM ncu_cases WHERE run_id = ? ORDER BY case_id", [run_id]
        ).fetchall()


def test_stored_roofline_fields_land_in_ncu_cases(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "new", run_id="new", with_ncu=True)
    _edit_ncu_cases(bundle, _with_roofline)
    expected = {
        c["case_id"]: tuple(c[f] for f in ROOFLINE_FIELDS) for c in json.loads((bundle / NCU_FILE).read_text())["cases"]
    }
    ingest_paths(parse_location(db_path), [bundle])
    rows = _stored(db_path, "new")
    assert len(rows) == len(expected) > 0
    assert {r[0]: tuple(r[1:]) for r in rows} == expected


def test_a_bundle_from_before_the_fields_ingests_with_nulls(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "old", run_id="old", with_ncu=True)

    def strip(index, case):
        for name in ROOFLINE_FIELDS:
            case.pop(name)
        case.update(dram_bytes=4e6, achieved_tflops=None, duration_us=20.0)

    _edit_ncu_cases(bundle, strip)
    assert "arithmetic_intensity" not in (bundle / NCU_FILE).read_text()
    ingest_paths(parse_location(db_path), [bundle])
    rows = _stored(db_path, "old")
    assert rows and all(value is None for row in rows for value in row[1:])
    with open_read(parse_location(db_path)) as con:  # the view derives what the old run did not store
        point = con.execute(
            "SELECT case_flops, arithmetic_intensity, intensity_source, achieved_tflops, tflops_source "
            "FROM ncu_roofline WHERE run_id = 'old' AND case_id = ?",
            [CASE],
        ).fetchone()
    flops, intensity, intensity_source, tflops, tflops_source = point
    assert flops > 0 and intensity == pytest.approx(flops / 4e6) and intensity_source == "derived"
    assert tflops == pytest.approx(flops / 20e-6 / 1e12) and tflops_source == "derived"


def test_the_view_uses_stored_values_over_a_recomputation(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "new", run_id="new", with_ncu=True)
    _edit_ncu_cases(bundle, _with_roofline)
    ingest_paths(parse_location(db_path), [bundle])
    with open_read(parse_location(db_path)) as con:
        rows = con.execute(
            "SELECT n.arithmetic_intensity, v.arithmetic_intensity, v.intensity_source, n.achieved_tflops, "
            "v.achieved_tflops, v.tflops_source, v.case_flops / v.dram_bytes, v.dram_excess_ratio, "
            "v.pct_of_peak, v.peak_tflops, v.variant "
            "FROM ncu_roofline v JOIN ncu_cases n USING (run_id, case_id)"
        ).fetchall()
    assert rows
    for stored_x, x, x_source, stored_y, y, y_source, recomputed_x, excess, pct, peak, variant in rows:
        assert x == stored_x and x_source == "stored" and x != pytest.approx(recomputed_x)
        assert y == stored_y and y_source == "stored"
        assert excess == pytest.approx(2.0) and peak == 666.5904706742397 and pct >= 10.0 and variant


def test_export_import_round_trips_the_roofline_columns(tmp_path, db_path):
    new = make_bundle(tmp_path / "new", run_id="new", with_ncu=True, seed=1)
    _edit_ncu_cases(new, _with_roofline)
    old = make_bundle(tmp_path / "old", run_id="old", with_ncu=True, seed=2)
    ingest_paths(parse_location(db_path), [new, old])
    export_history(parse_location(db_path), tmp_path / "export")
    fresh = tmp_path / "fresh.duckdb"
    import_history(parse_location(fresh), tmp_path / "export")
    for run_id in ("new", "old"):
        assert _stored(fresh, run_id) == _stored(db_path, run_id)
    assert any(v is not None for row in _stored(fresh, "new") for v in row[1:])


def test_migration_003_upgrades_a_history_written_at_version_2(tmp_path, db_path):
    history_at_version(db_path, 2, tmp_path)
    bundle = make_bundle(tmp_path / "new", run_id="new", with_ncu=True)
    _edit_ncu_cases(bundle, _with_roofline)
    ingest_paths(parse_location(db_path), [bundle])  # opening for writing applies 003 onwards
    with open_read(parse_location(db_path)) as con:
        versions = [v for (v,) in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        stored = con.execute("SELECT count(*) FROM ncu_roofline WHERE intensity_source = 'stored'").fetchone()[0]
    assert versions[:3] == [1, 2, 3] and stored == len(_stored(db_path, "new"))
