"""Export to Parquet and import back: a lossless, idempotent round trip with merging."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _fill(db_path, tmp_path, names, with_alerts=True):
    paths = [
        make_bundle(
            tmp_path / n,
            run_id=n,
            seed=int(n[1:]),
            started_at=T0 + timedelta(days=int(n[1:])),
            n_samples=10,
            with_ncu=True,
            statuses={"cuda_wmma": "crashed"},
        )
        for i, n in enumerate(names)
    ]
    ingest_paths(parse_location(db_path), paths)
    if with_alerts:
        with open_write(parse_location(db_path)) as con:
            for i, n in enumerate(names):
                alert_id = con.execute(
                    "INSERT INTO alerts (dedup_key, kind, metric, case_id, gpu_name, run_id, baseline_value, "
                    "new_value, change_pct, detail) VALUES (?, 'regression', 'median_us', 'sdpa/l4_mission/fp16/causal', "
                    "'NVIDIA H200', ?, 1.0, 1.1, 10.0, 'step') RETURNING alert_id",
                    [f"key-{n}", n],
                ).fetchone()[0]
                con.execute(
                    "INSERT INTO alert_events (alert_id, action, note, actor) VALUES (?, 'opened', '', 'ci')",
                    [alert_id],
                )
                if i == 0:
                    con.execute(
                        "INSERT INTO alert_events (alert_id, action, note, actor) VALUES (?, 'acknowledged', 'known', 'ana')",
                        [alert_id],
                    )


def _tables(db_path) -> dict[str, pd.DataFrame]:
    """Every data table, sorted by all columns, ids that are local to a database left out."""
    local = {"alerts": ["alert_id"], "alert_events": ["event_id", "alert_id"]}
    with open_read(parse_location(db_path)) as con:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE "
                "table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'"
            ).fetchall()
        ]
        out = {}
        for n in names:
            frame = con.execute(f"SELECT * FROM {n}").df().drop(columns=local.get(n, []))
            frame = frame.astype(str).sort_values(list(frame.columns)).reset_index(drop=True)
            out[n] = frame
        events = con.execute(
            "SELECT a.dedup_key, e.action, e.note, e.actor FROM alert_events e "
            "JOIN alerts a USING (alert_id) ORDER BY ALL"
        ).fetchall()
    out["alert_events_by_key"] = pd.DataFrame(events)
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        pd.testing.assert_frame_equal(a[name], b[name], obj=name)


def test_round_trip_into_an_empty_history(tmp_path, db_path, capsys):
    _fill(db_path, tmp_path, ["r1", "r2"])
    out = tmp_path / "export"
    assert cli_main(["--db", str(db_path), "export", str(out)]) == 0
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["schema_version"] >= 1 and manifest["tables"]["results"]["rows"] == 48
    assert manifest["tables"]["samples"]["rows"] == 2 * 20 * 10

    fresh = tmp_path / "fresh.duckdb"
    assert cli_main(["--db", str(fresh), "import", str(out)]) == 0
    _assert_same(_tables(db_path), _tables(fresh))
    with open_read(parse_location(fresh)) as con:  # MAP and list columns survive Parquet
        gaps = con.execute(
            "SELECT gap_to_backends['sdpa_flash'] FROM results WHERE case_id = "
            "'sdpa/l4_mission/fp16/causal' ORDER BY run_id"
        ).fetchall()
    assert all(g[0] > 0 for g in gaps)

    # The same export again adds nothing.
    capsys.readouterr()
    assert cli_main(["--db", str(fresh), "import", str(out)]) == 0
    assert "imported 0 new rows" in capsys.readouterr().out
    _assert_same(_tables(db_path), _tables(fresh))


def test_import_merges_into_an_existing_history(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    _fill(a, tmp_path / "ma", ["r1", "r2"])
    _fill(b, tmp_path / "mb", ["r2", "r3"])  # r2: the same bundle content in both (seeded)
    out = tmp_path / "export-a"
    from attnwatch.history.store.exchange import export_history, import_history

    export_history(parse_location(a), out)
    report = import_history(parse_location(b), out)
    assert report.rows["runs"] == 1 and report.skipped["runs"] == 1
    # key-r2 exists in both: its alert is kept once, but both logs' events are kept (they
    # happened at different times in different histories); key-r1 arrives with its 2 events.
    assert report.rows["alerts"] == 1 and report.rows["alert_events"] == 3
    with open_read(parse_location(b)) as con:
        runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        ids = con.execute("SELECT count(DISTINCT alert_id), count(*) FROM alerts").fetchone()
        acknowledged = con.execute(
            "SELECT a.dedup_key FROM alert_events e JOIN alerts a USING (alert_id) WHERE action = 'acknowledged'"
        ).fetchall()
    assert runs == ["r1", "r2", "r3"] and ids == (3, 3)
    assert sorted(acknowledged) == [("key-r1",), ("key-r2",)]


def test_import_refuses_a_clashing_run_and_writes_nothing(tmp_path):
    a, b = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    ingest_paths(parse_location(a), [make_bundle(tmp_path / "x", run_id="same", seed=1, n_samples=5)])
    ingest_paths(parse_location(b), [make_bundle(tmp_path / "y", run_id="same", seed=2, n_samples=5)])
    ingest_paths(parse_location(a), [make_bundle(tmp_path / "z", run_id="other", seed=3, n_samples=5)])
    from attnwatch.history.store.exchange import export_history, import_history

    export_history(parse_location(a), tmp_path / "e")
    with pytest.raises(BundleError, match="different content") as info:
        import_history(parse_location(b), tmp_path / "e")
    assert info.value.field == "run_id" and "runs.parquet" in info.value.path
    with open_read(parse_location(b)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_import_validates_before_writing(tmp_path, db_path, capsys):
    _fill(db_path, tmp_path, ["r1"], with_alerts=False)
    out = tmp_path / "e"
    from attnwatch.history.store.exchange import export_history

    export_history(parse_location(db_path), out)
    manifest = json.loads((out / "export.json").read_text())
    manifest["tables"]["samples"]["rows"] += 1
    (out / "export.json").write_text(json.dumps(manifest))
    fresh = tmp_path / "fresh.duckdb"
    assert cli_main(["--db", str(fresh), "import", str(out)]) == 2
    err = capsys.readouterr().err
    assert "samples.parquet" in err and "tables.samples.rows" in err
    with open_read(parse_location(fresh)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0

    (out / "results.parquet").write_bytes(b"not parquet")
    manifest["tables"]["samples"]["rows"] -= 1
    (out / "export.json").write_text(json.dumps(manifest))
    assert cli_main(["--db", str(fresh), "import", str(out)]) == 2
    assert "results.parquet: parquet" in capsys.readouterr().err


@pytest.mark.parametrize("exported_at", ["2026-12-05T08:00:00", "yesterday", None])
def test_import_refuses_an_export_time_without_its_offset(tmp_path, db_path, capsys, exported_at):
    """export.json's exported_at follows the timestamp rule of every file attnwatch reads."""
    _fill(db_path, tmp_path, ["r1"], with_alerts=False)
    out = tmp_path / "e"
    from attnwatch.history.store.exchange import export_history

    export_history(parse_location(db_path), out)
    manifest = json.loads((out / "export.json").read_text())
    manifest["exported_at"] = exported_at
    (out / "export.json").write_text(json.dumps(manifest))
    fresh = tmp_path / "fresh.duckdb"
    assert cli_main(["--db", str(fresh), "import", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"{out / 'export.json'}" in err and "exported_at" in err, err
    assert not fresh.exists()


def test_export_refuses_a_non_empty_directory(tmp_path, db_path):
    _fill(db_path, tmp_path, ["r1"], with_alerts=False)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    from attnwatch.history.store.exchange import export_history

    with pytest.raises(HistoryError, match="not empty"):
        export_history(parse_location(db_path), tmp_path / "busy")
    assert (tmp_path / "busy" / "keep.txt").read_text() == "mine"


def test_an_export_of_another_repository_is_refused_by_import_and_copy(tmp_path, db_path, capsys):
    """An export is a history's runs wholesale: `import` and `history copy` hold them to the
    repository rule an ingested bundle meets (history.contract.repository), and write nothing."""
    from attnwatch.history.store.copy import copy_history
    from attnwatch.history.contract.repository import RepositoryError

    other = tmp_path / "other.duckdb"
    ingest_paths(parse_location(other), [make_bundle(tmp_path / "b1", run_id="b1", repo="evil/other-repo")])
    export = tmp_path / "export"
    cli_main(["--db", str(other), "export", str(export)])
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "a1", run_id="a1")])
    before = _tables(db_path)
    capsys.readouterr()
    assert cli_main(["--db", str(db_path), "import", str(export)]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "runs.parquet: runs.repo: 'evil/other-repo' is not this history's repository" in err
    with pytest.raises(BundleError, match=r"other\.duckdb: runs\.repo: 'evil/other-repo'"):
        copy_history(parse_location(other), parse_location(db_path))
    with pytest.raises(BundleError, match=r"'evil/other-repo' is not .* \(ATTNWATCH_REPO\)"):
        copy_history(parse_location(other), parse_location(tmp_path / "fresh.duckdb"), repo="example/attention-kernels")
    with pytest.raises(RepositoryError, match="ATTNWATCH_REPO is 'someone/else'"):
        copy_history(parse_location(other), parse_location(db_path), repo="someone/else")
    _assert_same(before, _tables(db_path))
    # Into an empty history with no setting, the export's own repository is taken, as at a first ingest.
    copy_history(parse_location(other), parse_location(tmp_path / "empty.duckdb"))
