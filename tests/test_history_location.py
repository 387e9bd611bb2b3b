"""The history location setting, the lake's DDL translation and the storage-format guard: no server needed."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import pytest

from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import StorageTooNewError, open_read, open_write
from attnwatch.history.store.lake_ddl import lake_sql
from attnwatch.history.store.location import HistoryLocation, LocationError, default_location, parse_location
from attnwatch.history.store.migrations import available_migrations


def test_a_path_is_a_file_history_and_the_default_is_one(monkeypatch, tmp_path):
    monkeypatch.delenv("ATTNWATCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_location() == HistoryLocation(path=tmp_path / "attnwatch" / "history.duckdb")
    assert parse_location("~/h.duckdb").path == Path.home() / "h.duckdb"
    assert not parse_location(tmp_path / "x.duckdb").is_lake


def test_a_lake_location_takes_its_data_path_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", str(tmp_path / "data"))
    loc = parse_location("ducklake:postgres:dbname=attnwatch host=db.internal user=ci")
    assert loc.is_lake and loc.catalog == "dbname=attnwatch host=db.internal user=ci"
    assert loc.data_path == str(tmp_path / "data") + "/"
    assert loc.label == "ducklake:postgres:dbname=attnwatch host=db.internal user=ci"
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", "s3://team-bucket/attnwatch")
    s3 = parse_location("ducklake:postgres:dbname=a")
    assert s3.data_path == "s3://team-bucket/attnwatch/" and s3.is_s3
    monkeypatch.delenv("ATTNWATCH_LAKE_DATA")
    assert parse_location("ducklake:postgres:dbname=a").data_path is None  # readers need none


@pytest.mark.parametrize(
    "value, says",
    [
        ("ducklake:postgres:dbname=a password=secret", "PGPASSFILE"),
        ("ducklake:postgres:dbname=a  PASSWORD = secret", "PGPASSFILE"),
        ("ducklake:postgres:postgresql://ci:secret@db/attnwatch", "PGPASSFILE"),
        ("ducklake:postgres:", "no PostgreSQL connection string"),
        ("ducklake:sqlite:lake.db", "DuckLake with a PostgreSQL catalog"),
        ("ducklake:postgres:dbname='a'", "quotes"),
        ("", "empty"),
    ],
)
def test_a_bad_location_is_refused_with_a_reason(value, says):
    with pytest.raises(LocationError, match=says):
        parse_location(value)


def test_a_password_in_the_setting_fails_the_cli_cleanly(monkeypatch, capsys):
    monkeypatch.setenv("ATTNWATCH_DB", "ducklake:postgres:dbname=a password=hunter2")
    assert cli_main(["sql", "SELECT 1"]) == 2
    err = capsys.readouterr().err
    assert "PGPASSFILE" in err and "hunter2" not in err


def test_an_unsupported_data_url_is_refused(monkeypatch):
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", "gs://bucket/x")
    with pytest.raises(LocationError, match="s3://"):
        parse_location("ducklake:postgres:dbname=a")


def test_lake_translation_drops_only_what_ducklake_rejects():
    sql = """
    -- a comment with a ; and a CHECK (x)
    CREATE SEQUENCE ids START 1;
    CREATE TABLE t (
        id BIGINT PRIMARY KEY DEFAULT nextval('ids'),
        key VARCHAR NOT NULL UNIQUE,
        kind VARCHAR NOT NULL CHECK (kind IN ('a', 'b')),
        note VARCHAR NOT NULL DEFAULT 'x; (y)',
        seen_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
        m MAP(VARCHAR, DOUBLE),
        PRIMARY KEY (id),
        UNIQUE (key, kind)
    );
    CREATE VIEW v AS SELECT * FROM t WHERE kind IN ('a');
    ALTER TABLE t ADD COLUMN extra INTEGER;
    """
    out = lake_sql(sql)
    assert "SEQUENCE" not in out and "nextval" not in out and "PRIMARY" not in out
    assert "UNIQUE" not in out and "CHECK" not in out
    assert "note VARCHAR NOT NULL DEFAULT 'x; (y)'" in out
    assert "seen_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')" in out
    assert "m MAP(VARCHAR, DOUBLE)" in out and "kind VARCHAR NOT NULL," in out
    assert "CREATE VIEW v AS SELECT * FROM t WHERE kind IN ('a')" in out
    assert "ALTER TABLE t ADD COLUMN extra INTEGER" in out
    con = duckdb.connect()
    con.execute(out)  # still valid SQL
    assert [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 't' ORDER BY ordinal_position"
        ).fetchall()
    ] == ["id", "key", "kind", "note", "seen_at", "m", "extra"]


def test_every_shipped_migration_translates_to_constraint_free_sql():
    for m in available_migrations():
        out = lake_sql(m.sql).upper()
        for word in ("PRIMARY KEY", " UNIQUE", "CHECK (", "CREATE SEQUENCE", "NEXTVAL", "CREATE INDEX", "REFERENCES"):
            assert word not in out, (m.name, word)


NEWER_FILE = Path(__file__).resolve().parent / "data" / "duckdb-2.0.0-storage.duckdb.gz"


def test_a_file_from_a_newer_duckdb_is_a_clear_error_with_the_way_out(tmp_path, capsys):
    """tests/data/duckdb-2.0.0-storage.duckdb.gz was written by duckdb==2.0.0 (one table `runs`,
    one row, checkpointed): its storage version is 999, and the pinned 1.5.5 reads 64 to 68."""
    db = tmp_path / "history.duckdb"
    db.write_bytes(gzip.decompress(NEWER_FILE.read_bytes()))
    for opener in (open_read, open_write):
        with pytest.raises(StorageTooNewError) as info:
            with opener(parse_location(db)):
                pass
        message = str(info.value)
        assert str(db) in message and "storage version 999" in message
        assert "attnwatch --db" in message and "export" in message and "import" in message
    assert cli_main(["--db", str(db), "sql", "SELECT 1"]) == 2
    assert "newer DuckDB" in capsys.readouterr().err
