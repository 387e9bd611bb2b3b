"""Host and GPU identity in the history (migration 006): stored per run from the bundle, NULL for
bundles written before it, refused when malformed, and filled in for a history upgraded from
schema 5 without duplicating its alerts."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone

import duckdb
import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.ingest.rows import commit_row, run_row, table_rows
from attnwatch.history.store.db import open_read, upgrade
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.arrow_insert import insert_arrow, rows_to_arrow
from attnwatch.history.contract.validate import load_bundle
from attnwatch.history.store.migrations import available_migrations
from old_history import history_at_version
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
IDENTITY = {
    "gpu_uuid": "GPU-1b1b1b1b-5555-6666-7777-888888888888",
    "gpu_pci_bus_id": "00000000:3B:00.0",
    "gpu_index": 1,
}
NEW_FIELDS = ("gpu_pci_bus_id", "gpu_index", "gpu_mig_uuid", "pool")


def _run(db_path, run_id):
    with open_read(parse_location(db_path)) as con:
        cur = con.execute(
            "SELECT hostname, pool, gpu_uuid, gpu_pci_bus_id, gpu_index, gpu_mig_uuid FROM runs WHERE run_id = ?",
            [run_id],
        )
        return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def _strip_new_fields(bundle):
    """The manifest as the writer before migration 006 wrote it: no identity or pool keys."""
    path = bundle / "manifest.json"
    doc = json.loads(path.read_text())
    for name in NEW_FIELDS:
        del doc["environment"][name]
    path.write_text(json.dumps(doc))
    return bundle


def test_a_run_stores_its_host_and_gpu(tmp_path, db_path):
    pinned = make_bundle(tmp_path / "gpu1", run_id="gpu1", hostname="h200-a", environment=IDENTITY)
    pooled = make_bundle(tmp_path / "pooled", run_id="pooled", hostname="h200-b", environment={"pool": "h200-rack2"})
    ingest_paths(parse_location(db_path), [pinned, pooled])
    assert _run(db_path, "gpu1") == {"hostname": "h200-a", "pool": "h200-a", "gpu_mig_uuid": None, **IDENTITY}
    assert _run(db_path, "pooled")["pool"] == "h200-rack2"  # a declared pool wins over the host name
    with open_read(parse_location(db_path)) as con:
        detail = con.execute(
            "SELECT DISTINCT hostname, pool, gpu_index FROM result_details WHERE run_id = 'gpu1'"
        ).fetchall()
    assert detail == [("h200-a", "h200-a", 1)]


def test_a_bundle_from_before_identity_still_ingests_with_nulls(tmp_path, db_path):
    old = _strip_new_fields(make_bundle(tmp_path / "old", run_id="old", hostname="h200-a"))
    assert "pool" not in json.loads((old / "manifest.json").read_text())["environment"]
    report = ingest_paths(parse_location(db_path), [old])
    assert [b.action for b in report.bundles] == ["inserted"]
    row = _run(db_path, "old")
    assert (row["gpu_pci_bus_id"], row["gpu_index"], row["gpu_mig_uuid"]) == (None, None, None)
    assert row["pool"] == "h200-a"  # the host's pool: the same series as that host's new runs


@pytest.mark.parametrize(
    "field,good,bad,why",
    [
        ("pool", "h200-rack2", "rack 2; DROP TABLE runs", "a pool name is"),
        ("pool", "h200-rack2", "", "a pool name is"),
        ("gpu_pci_bus_id", "00000000:3B:00.0", "<script>", "not a PCI bus id"),
        ("gpu_index", 7, -1, "not an NVML device index"),
    ],
)
def test_malformed_identity_is_refused_naming_the_field(tmp_path, field, good, bad, why):
    def with_value(name, value):
        bundle = make_bundle(tmp_path / name, run_id=name)
        doc = json.loads((bundle / "manifest.json").read_text())
        doc["environment"][field] = value
        (bundle / "manifest.json").write_text(json.dumps(doc))
        return bundle

    assert getattr(load_bundle(with_value("good", good)).manifest.environment, field) == good
    with pytest.raises(BundleError) as info:
        load_bundle(with_value("bad", bad))
    assert info.value.field == f"environment.{field}" and why in info.value.message


def _ingest_as_schema_5(con, bundle_dir) -> None:
    """Store a bundle the way attnwatch at schema 5 did: the columns that schema had, nothing else."""
    b = load_bundle(bundle_dir)
    runs_columns = {
        c
        for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'"
        ).fetchall()
    }
    insert_arrow(con, "runs", rows_to_arrow([{k: v for k, v in run_row(b).items() if k in runs_columns}]))
    commit = commit_row(b)
    con.execute("INSERT OR IGNORE INTO commits VALUES (?, ?, ?, ?, ?, ?)", list(commit.values()))
    for table, rows in table_rows(b).items():
        columns = {
            c
            for (c,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
            ).fetchall()
        }
        insert_arrow(con, table, rows.select([c for c in rows.column_names if c in columns]))


def test_upgrading_a_schema_5_history_keeps_its_series_and_alerts(tmp_path, db_path, capsys):
    history_at_version(db_path, 5, tmp_path)
    con = duckdb.connect(str(db_path))
    try:
        for i in range(16):
            _ingest_as_schema_5(
                con,
                make_bundle(
                    tmp_path / f"b{i}",
                    run_id=f"run-{i}",
                    commit_sha=f"{i:040x}",
                    seed=i,
                    hostname="h200-a",
                    started_at=T0 + timedelta(hours=i),
                    commit_date=T0 + timedelta(hours=i),
                    variants=("sdpa", "triton_fa2"),
                    variant_scale={"triton_fa2": 1.06} if i >= 10 else None,
                ),
            )
        # The alerts attnwatch detect recorded at schema 5 for the planted step (old dedup key format).
        steps = con.execute("SELECT DISTINCT case_id FROM results WHERE variant = 'triton_fa2'").fetchall()
        for (case_id,) in steps:
            for metric in ("median_us", "gap_to_sdpa"):
                con.execute(
                    "INSERT INTO alerts (dedup_key, kind, metric, case_id, gpu_name, run_id, commit_sha) "
                    "VALUES (?, 'regression', ?, ?, 'NVIDIA H200', 'run-10', ?)",
                    [f"step|{case_id}|NVIDIA H200|{metric}|{10:040x}", metric, case_id, f"{10:040x}"],
                )
    finally:
        con.close()

    assert upgrade(parse_location(db_path)) == [m.version for m in available_migrations() if m.version > 5]
    with open_read(parse_location(db_path)) as con:
        assert con.execute("SELECT DISTINCT pool FROM runs").fetchall() == [("h200-a",)]
        assert con.execute("SELECT count(*), count(gpu_pci_bus_id) FROM runs").fetchone() == (16, 0)
        assert con.execute("SELECT DISTINCT pool FROM alerts").fetchall() == [("h200-a",)]
    before = {a.dedup_key for a in list_alerts(parse_location(db_path), {"limit": 1000})}
    assert len(before) == 8
    # Control: without the stored alerts, this scan finds those 8 steps (in the pool h200-a).
    control = tmp_path / "control.duckdb"
    shutil.copy(db_path, control)
    with duckdb.connect(str(control)) as con:
        con.execute("DELETE FROM alerts")
    assert cli_main(["--db", str(control), "detect", "--dry-run"]) == 0
    assert "8 findings" in capsys.readouterr().out
    assert cli_main(["--db", str(db_path), "detect"]) == 0
    assert {
        a.dedup_key for a in list_alerts(parse_location(db_path), {"limit": 1000})
    } == before  # the same steps, not new ones
    assert "0 findings" in capsys.readouterr().out


def test_latest_main_run_per_host(tmp_path, db_path):
    ingest_paths(
        parse_location(db_path),
        [
            make_bundle(
                tmp_path / f"{host}-{i}",
                run_id=f"{host}-{i}",
                hostname=host,
                seed=i,
                started_at=T0 + timedelta(hours=2 * i + (host == "h200-b")),
                variants=("sdpa",),
            )
            for i in range(3)
            for host in ("h200-a", "h200-b")
        ],
    )
    with open_read(parse_location(db_path)) as con:
        latest = con.execute("SELECT pool, run_id FROM latest_main_runs ORDER BY pool").fetchall()
    assert latest == [("h200-a", "h200-a-2"), ("h200-b", "h200-b-2")]
