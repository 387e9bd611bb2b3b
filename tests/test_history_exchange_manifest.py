"""An export manifest whose entries have the wrong JSON types is refused with one line naming the
field, before anything is written (history.store.exchange)."""

from __future__ import annotations

import json

import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import open_read
from attnwatch.history.store.exchange import export_history
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location


@pytest.fixture
def export_dir(tmp_path, db_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "r1", run_id="r1", n_samples=3)])
    out = tmp_path / "export"
    export_history(parse_location(db_path), out)
    return out


@pytest.mark.parametrize("version", [[1], {"v": 1}, "1", True, None])
def test_a_migration_version_that_is_not_an_integer_is_refused(export_dir, tmp_path, capsys, version):
    manifest = json.loads((export_dir / "export.json").read_text())
    manifest["migrations"][0]["version"] = version
    (export_dir / "export.json").write_text(json.dumps(manifest))
    fresh = tmp_path / "fresh.duckdb"
    assert cli_main(["--db", str(fresh), "import", str(export_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "export.json: migrations[0]:" in err and "\n" not in err and "Traceback" not in err
    with open_read(parse_location(fresh)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_a_table_entry_that_is_not_an_object_is_refused(export_dir, tmp_path, capsys):
    manifest = json.loads((export_dir / "export.json").read_text())
    manifest["tables"]["results"] = 48
    (export_dir / "export.json").write_text(json.dumps(manifest))
    fresh = tmp_path / "fresh.duckdb"
    assert cli_main(["--db", str(fresh), "import", str(export_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "export.json: tables.results:" in err and "\n" not in err and "Traceback" not in err
