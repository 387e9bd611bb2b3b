"""Moving a team over: a history file copies into a lake and back, losslessly and verifiably."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

from app_history import build_history
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store import copy as history_copy
from attnwatch.history.detection.alerts import acknowledge
from attnwatch.history.store.copy import CopyVerificationError, copy_history, missing_count, table_hashes
from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import parse_location


def _frames(location) -> dict[str, pd.DataFrame]:
    """Every table, every column (ids included), rows sorted: equal frames mean equal tables."""
    out = {}
    with open_read(parse_location(location)) as con:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND "
                "table_catalog = current_database() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'"
            ).fetchall()
        ]
        for table in tables:
            frame = con.execute(f'SELECT * FROM "{table}"').df()
            frame = frame[sorted(frame.columns)].astype(str)
            out[table] = frame.sort_values(list(frame.columns)).reset_index(drop=True)
    return out


def test_a_file_copies_into_a_lake_and_back_with_equal_counts_and_checksums(lake_db, tmp_path, capsys):
    source = tmp_path / "team.duckdb"
    build_history(source, tmp_path / "bundles")
    acknowledge(parse_location(source), 1, "known: tile change", "ana")
    original = _frames(source)
    assert original["samples"].shape[0] > 1000 and len(original["alerts"]) >= 2 and len(original["alert_events"]) >= 3

    assert cli_main(["history", "copy", str(source), lake_db]) == 0
    out = capsys.readouterr().out
    for table in original:
        line = next(line for line in out.splitlines() if line.startswith(f"{table} "))
        assert line.endswith("(equal)"), line
    src_hashes, lake_hashes = table_hashes(parse_location(source)), table_hashes(parse_location(lake_db))
    assert {t: (len(h), history_copy.checksum(h)) for t, h in src_hashes.items()} == {
        t: (len(h), history_copy.checksum(h)) for t, h in lake_hashes.items()
    }

    back = tmp_path / "back.duckdb"
    report = copy_history(parse_location(lake_db), parse_location(back))
    assert all(t.source_checksum == t.destination_checksum for t in report.tables)
    copied = _frames(back)
    assert copied.keys() == original.keys()
    for table in original:  # every column, alert and event ids included: the copy is exact
        pd.testing.assert_frame_equal(copied[table], original[table], obj=table)

    again = copy_history(parse_location(source), parse_location(lake_db))  # moving twice adds nothing
    assert sum(t.inserted for t in again.tables) == 0
    assert _frames(lake_db).keys() == original.keys()


def test_a_copy_into_a_history_with_other_runs_merges_and_verifies(lake_db, tmp_path):
    first, second = tmp_path / "first.duckdb", tmp_path / "second.duckdb"
    build_history(first, tmp_path / "a")
    copy_history(parse_location(first), parse_location(lake_db))
    from bundle_factory import make_bundle
    from attnwatch.history.ingest.write import ingest_paths

    ingest_paths(parse_location(second), [make_bundle(tmp_path / "extra", run_id="extra-run", n_samples=5)])
    report = copy_history(parse_location(second), parse_location(lake_db))
    runs = next(t for t in report.tables if t.table == "runs")
    assert (runs.source_rows, runs.inserted, runs.missing) == (1, 1, 0)
    assert runs.destination_rows == runs.source_rows + len(_frames(first)["runs"])


def test_a_row_lost_in_the_copy_is_an_error_naming_the_table(tmp_path, monkeypatch):
    source, target = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    build_history(source, tmp_path / "bundles")
    real_import = history_copy.import_history

    def lossy_import(db, directory, repo=None):
        report = real_import(db, directory, repo)
        con = duckdb.connect(str(db))
        con.execute("DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples LIMIT 3)")
        con.close()
        return report

    monkeypatch.setattr(history_copy, "import_history", lossy_import)
    with pytest.raises(CopyVerificationError, match="table samples: 3 of"):
        copy_history(parse_location(source), parse_location(target))


def test_missing_count_is_a_multiset_difference():
    a = np.array([5, 5, 7, 9], dtype=np.uint64)
    assert missing_count(a, np.array([9, 7, 5, 5, 1], dtype=np.uint64)) == 0
    assert missing_count(a, np.array([5, 7, 9], dtype=np.uint64)) == 1
    assert missing_count(a, np.zeros(0, dtype=np.uint64)) == 4
    assert missing_count(np.array([2**64 - 1], dtype=np.uint64), np.array([0], dtype=np.uint64)) == 1
