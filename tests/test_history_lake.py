"""A DuckLake history on a real PostgreSQL server (the session's, tests/pg_server.py): the same
schema as a file, idempotent ingest without constraints, every command, and the SQL lock-down."""

from __future__ import annotations

import duckdb
import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import open_read, open_write, schema_version
from attnwatch.history.errors import BundleError, HistoryNotFoundError, MigrationError, QueryError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store import lake
from attnwatch.history.store.lake import current_snapshot
from attnwatch.history.store.location import parse_location
from attnwatch.history.store.migrations import applied_migrations, code_schema_version, migrate
from attnwatch.history.sql.query import run_user_sql
from attnwatch.history.store.transactions import CLAIM_SCHEMA


def _schema(location) -> list[tuple]:
    """Tables' columns (type, nullability) and views' result columns (type), in order.

    Views are read by running them: a file's information_schema keeps a view's columns as of its
    creation, while `SELECT *` in it picks up columns added later (migration 004)."""
    with open_read(parse_location(location)) as con:
        tables = con.execute(
            "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.ordinal_position "
            "FROM information_schema.columns c JOIN information_schema.tables t USING (table_catalog, table_schema, table_name) "
            "WHERE c.table_schema = 'main' AND c.table_catalog = current_database() AND t.table_type = 'BASE TABLE' "
            "ORDER BY ALL"
        ).fetchall()
        views = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_catalog = current_database() AND table_type = 'VIEW' ORDER BY 1"
            ).fetchall()
        ]
        for view in views:
            described = con.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()
            tables += [(view, name, kind, "view", i) for i, (name, kind, *_) in enumerate(described)]
    return tables


def _count(location, sql: str) -> int:
    with open_read(parse_location(location)) as con:
        return con.execute(sql).fetchone()[0]


def test_migrations_give_a_lake_the_files_tables_views_and_columns(lake_db, db_path):
    with open_write(parse_location(db_path)):
        pass
    with open_write(parse_location(lake_db)):
        pass
    assert _schema(lake_db) == _schema(db_path)
    with open_read(parse_location(lake_db)) as lake, open_read(parse_location(db_path)) as file:
        assert applied_migrations(lake) == applied_migrations(file)  # checksums of the shipped files
    assert schema_version(parse_location(lake_db)) == (code_schema_version(), code_schema_version())


def test_a_new_lake_takes_its_whole_schema_in_one_commit_and_a_failure_leaves_it_empty(lake_db, tmp_path):
    """A lake with no schema yet takes every migration in one transaction (history.store.migrations):
    one commit and one release of its claims, where a migration per transaction made 35; and a
    migration that fails there leaves the lake without a schema, not half-built."""
    location = parse_location(lake_db)
    broken = tmp_path / "migrations"
    broken.mkdir()
    (broken / "001_initial.sql").write_text("CREATE TABLE first_table (a INTEGER);\n")
    (broken / "002_broken.sql").write_text("ALTER TABLE no_such_table ADD COLUMN b INTEGER;\n")
    con = lake.connect(location, read_only=False)
    try:
        with pytest.raises(MigrationError, match="002_broken"):
            migrate(con, location.label, directory=broken)
        assert not applied_migrations(con)
        assert con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'first_table'"
        ).fetchone() == (0,)
        before = current_snapshot(con)
        assert migrate(con, location.label) == list(range(1, code_schema_version() + 1))
        assert current_snapshot(con) - before == 2  # the migrations' commit, then their claims dropped
    finally:
        con.close()


def test_a_lake_rejects_the_clauses_that_the_translation_removes(lake_db):
    with open_write(parse_location(lake_db)) as con:
        for ddl, says in (
            ("CREATE TABLE k (a INTEGER PRIMARY KEY)", "PRIMARY KEY"),
            ("CREATE TABLE k (a INTEGER UNIQUE)", "UNIQUE"),
            ("CREATE TABLE k (a INTEGER CHECK (a > 0))", "CHECK"),
            ("CREATE SEQUENCE k", "sequences"),
        ):
            with pytest.raises(duckdb.NotImplementedException, match=says):
                con.execute(ddl)


def test_ingest_into_a_lake_is_idempotent_without_constraints(lake_db, tmp_path):
    bundles = [
        make_bundle(tmp_path / f"b{i}", run_id=f"run-{i}", seed=i, n_samples=10, commit_sha="ab" * 20, with_ncu=True)
        for i in range(2)
    ]
    first = ingest_paths(parse_location(lake_db), bundles)
    assert [b.action for b in first.bundles] == ["inserted", "inserted"]
    counts = {
        t: _count(lake_db, f"SELECT count(*) FROM {t}")
        for t in ("runs", "commits", "results", "samples", "ncu_metrics")
    }
    assert counts["runs"] == 2 and counts["commits"] == 1 and counts["results"] == 48
    again = ingest_paths(parse_location(lake_db), bundles)
    assert [b.action for b in again.bundles] == ["skipped", "skipped"]
    assert {t: _count(lake_db, f"SELECT count(*) FROM {t}") for t in counts} == counts
    # The same run id with other content is refused, and nothing is written.
    clash = make_bundle(tmp_path / "clash", run_id="run-0", seed=99, n_samples=10)
    snapshot = _snapshot(lake_db)
    with pytest.raises(BundleError, match="different content"):
        ingest_paths(parse_location(lake_db), [clash])
    assert _snapshot(lake_db) == snapshot
    assert _count(lake_db, f"SELECT count(*) FROM information_schema.tables WHERE table_schema = '{CLAIM_SCHEMA}'") == 0


def _snapshot(location) -> int:
    with open_read(parse_location(location)) as con:
        return current_snapshot(con)


def test_a_later_run_fills_what_a_stored_commit_lacked(lake_db, tmp_path):
    sha = "cd" * 20
    ingest_paths(
        parse_location(lake_db),
        [make_bundle(tmp_path / "a", run_id="a", commit_sha=sha, commit_message=None, n_samples=5)],
    )
    ingest_paths(
        parse_location(lake_db),
        [make_bundle(tmp_path / "b", run_id="b", commit_sha=sha, commit_message="Fuse softmax", n_samples=5)],
    )
    with open_read(parse_location(lake_db)) as con:
        assert con.execute("SELECT count(*), any_value(message) FROM commits").fetchone() == (1, "Fuse softmax")


def test_readers_need_only_the_catalog_and_a_missing_lake_is_a_clear_error(lake_db, tmp_path, monkeypatch, capsys):
    with pytest.raises(HistoryNotFoundError, match="no lake history"):
        with open_read(parse_location(lake_db)):
            pass
    assert cli_main(["--db", lake_db, "migrate", "--check"]) == 2  # --check never creates
    assert "no lake history" in capsys.readouterr().err
    monkeypatch.delenv("ATTNWATCH_LAKE_DATA")
    assert cli_main(["--db", lake_db, "migrate"]) == 2
    assert "ATTNWATCH_LAKE_DATA" in capsys.readouterr().err
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", str(tmp_path / "lake-data"))
    assert cli_main(["--db", lake_db, "migrate"]) == 0  # the README's first step creates the lake
    assert "created a lake" in capsys.readouterr().out
    assert cli_main(["--db", lake_db, "migrate"]) == 0
    out = capsys.readouterr().out
    assert "left at schema" in out and "nothing to apply" in out
    ingest_paths(parse_location(lake_db), [make_bundle(tmp_path / "b", n_samples=5)])
    monkeypatch.delenv("ATTNWATCH_LAKE_DATA")
    assert parse_location(lake_db).data_path is None
    assert run_user_sql(parse_location(lake_db), "SELECT count(*) AS n FROM results").n.tolist() == [24]


def test_every_command_works_on_a_lake(lake_db, tmp_path, capsys):
    bundles = [
        make_bundle(
            tmp_path / f"b{i}",
            run_id=f"main-{i}",
            seed=i,
            n_samples=8,
            commit_sha=f"{i:02d}" * 20,
            statuses={"cuda_wmma": "failed"} if i == 2 else None,
        )
        for i in range(3)
    ]
    assert cli_main(["--db", lake_db, "ingest", *map(str, bundles)]) == 0
    assert "3 run(s) inserted" in capsys.readouterr().out
    assert cli_main(["--db", lake_db, "migrate", "--check"]) == 0
    assert "(current)" in capsys.readouterr().out
    assert cli_main(["--db", lake_db, "sql", "SELECT count(*) AS n FROM runs"]) == 0
    assert capsys.readouterr().out.splitlines()[2].strip() == "3"
    assert cli_main(["--db", lake_db, "detect"]) == 0
    detected = capsys.readouterr().out
    assert cli_main(["--db", lake_db, "detect"]) == 0  # again: nothing new
    assert ", 0 new alerts" in capsys.readouterr().out
    alerts = _count(lake_db, "SELECT count(*) FROM alerts")
    assert alerts >= 1, detected  # the failed correctness case
    assert cli_main(["--db", lake_db, "alerts", "ack", "1", "--note", "known", "--by", "ana"]) == 0
    assert (
        cli_main(["--db", lake_db, "alerts", "bisected", "1", "--commit", "c" * 40, "--by", "ana"]) == 0
    )  # migration 009
    assert cli_main(["--db", lake_db, "alerts", "resolve", "1", "--by", "ana"]) == 0
    with open_read(parse_location(lake_db)) as con:
        assert con.execute("SELECT status FROM alerts WHERE alert_id = 1").fetchone() == ("resolved",)
        assert con.execute("SELECT list(action ORDER BY event_id) FROM alert_events WHERE alert_id = 1").fetchone()[
            0
        ] == ["opened", "acknowledged", "bisected", "resolved"]
        assert con.execute("SELECT count(DISTINCT event_id) = count(*) FROM alert_events").fetchone() == (True,)
    capsys.readouterr()
    assert cli_main(["--db", lake_db, "export", str(tmp_path / "export")]) == 0
    copy = tmp_path / "copy.duckdb"
    assert cli_main(["--db", str(copy), "import", str(tmp_path / "export")]) == 0
    assert cli_main(["--db", lake_db, "import", str(tmp_path / "export")]) == 0  # into itself: adds nothing
    assert "imported 0 new rows" in capsys.readouterr().out
    assert _count(copy, "SELECT count(*) FROM results") == _count(lake_db, "SELECT count(*) FROM results") == 72


def _hostile(tmp_path, data_dir) -> list[tuple[str, str]]:
    """(statement, fragment of the refusal) on a lake: the file's list plus the catalog's doors."""
    out = tmp_path / "stolen"
    catalog = "__ducklake_metadata_history"
    return [
        ("INSERT INTO runs (run_id) VALUES ('x')", "SELECT statements only"),
        ("CREATE TABLE evil (x INTEGER)", "SELECT statements only"),
        ("DROP TABLE results", "SELECT statements only"),
        ("DELETE FROM results", "SELECT statements only"),
        ("UPDATE alerts SET status = 'resolved'", "SELECT statements only"),
        (f"COPY results TO '{out}.csv'", "SELECT statements only"),
        (f"EXPORT DATABASE '{out}_dir'", "SELECT statements only"),
        (f"ATTACH '{out}.duckdb' AS other", "SELECT statements only"),
        ("DETACH history", "SELECT statements only"),
        ("SET enable_external_access = true", "SELECT statements only"),
        ("INSTALL httpfs", "SELECT statements only"),
        ("LOAD httpfs", "SELECT statements only"),
        ("CALL postgres_attach('dbname=postgres host=127.0.0.1')", "SELECT statements only"),
        ("SELECT * FROM read_csv('/etc/passwd')", "file system operations are disabled"),
        (f"SELECT * FROM read_parquet('{tmp_path}/*.parquet')", "file system operations are disabled"),
        (f"SELECT * FROM glob('{data_dir}/../*')", "file system operations are disabled"),
        (f"SELECT * FROM postgres_query('{catalog}', 'SELECT pg_read_file(''/etc/hostname'')')", "not available"),
        (f"SELECT * FROM POSTGRES_QUERY('{catalog}', 'SELECT 1')", "not available"),
        ("SELECT * FROM postgres_scan('dbname=postgres host=127.0.0.1', 'public', 'x')", "not available"),
        (f"SELECT * FROM {catalog}.public.ducklake_snapshot", "own tables only"),
        (f'SELECT * FROM runs r JOIN "{catalog}".public.ducklake_table t ON true', "own tables only"),
        ("SELECT * FROM ducklake_expire_snapshots('history', older_than => now())", "not available"),
        ("SELECT * FROM ducklake_cleanup_old_files('history', cleanup_all => true)", "not available"),
        ("SELECT * FROM query('SELECT * FROM postgres_query(''x'', ''SELECT 1'')')", "not available"),
        ("SELECT (SELECT count(*) FROM query_table('runs'))", "not available"),
        ("WITH x AS (SELECT * FROM postgres_query('a', 'SELECT 1')) SELECT * FROM x", "not available"),
    ]


def test_hostile_sql_on_a_lake_is_refused_without_side_effects(lake_db, tmp_path, postgres_server):
    ingest_paths(parse_location(lake_db), [make_bundle(tmp_path / "b", n_samples=20)])
    data_dir = parse_location(lake_db).data_path.rstrip("/")
    dbname = parse_location(lake_db).catalog.split()[0].split("=")[1]
    catalog_tables = postgres_server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", dbname)
    files = sorted(p for p in (tmp_path / "lake-data").rglob("*"))
    snapshot = _snapshot(lake_db)
    for statement, refusal in _hostile(tmp_path, data_dir):
        with pytest.raises(QueryError) as info:
            run_user_sql(parse_location(lake_db), statement)
        assert refusal in str(info.value), (statement, str(info.value))
    assert _snapshot(lake_db) == snapshot
    assert sorted(p for p in (tmp_path / "lake-data").rglob("*")) == files
    assert postgres_server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", dbname) == catalog_tables
    assert not list(tmp_path.glob("stolen*"))
    # What users do ask still works: SELECTs, DESCRIBE, SHOW, SUMMARIZE, the snapshot list.
    assert run_user_sql(parse_location(lake_db), "SELECT count(*) AS n FROM results").n.tolist() == [24]
    assert "run_id" in run_user_sql(parse_location(lake_db), "DESCRIBE runs").column_name.tolist()
    assert "results" in run_user_sql(parse_location(lake_db), "SHOW TABLES").name.tolist()
    assert len(run_user_sql(parse_location(lake_db), "SUMMARIZE results")) > 10
    assert len(run_user_sql(parse_location(lake_db), "SELECT snapshot_id FROM ducklake_snapshots('history')")) >= 2


def test_the_lakes_connection_string_holds_no_secret_user_sql_could_read(lake_db, tmp_path):
    ingest_paths(parse_location(lake_db), [make_bundle(tmp_path / "b", n_samples=5)])
    # User SQL cannot list the attached databases at all (history.sql.guard) ...
    with pytest.raises(QueryError, match="duckdb_databases is not available"):
        run_user_sql(parse_location(lake_db), "SELECT path FROM duckdb_databases()")
    # ... and what it would have shown, the attached catalog string, carries no password anyway.
    with open_read(parse_location(lake_db)) as con:
        paths = [p or "" for (p,) in con.execute("SELECT path FROM duckdb_databases()").fetchall()]
    assert any("dbname=" in p for p in paths)
    assert not any("password" in p.lower() for p in paths)
    with pytest.raises(QueryError):
        run_user_sql(parse_location(lake_db), "SELECT getenv('PGPASSWORD')")
    with pytest.raises(QueryError, match="file system operations are disabled"):
        run_user_sql(parse_location(lake_db), "SELECT * FROM read_text('~/.pgpass')")


def test_a_read_only_catalog_role_serves_the_dashboard_and_cannot_write(lake_db, tmp_path, postgres_server):
    """README's team set-up: the dashboard's role may only SELECT the catalog, so even a door the
    SQL gate missed could not write through it."""
    ingest_paths(parse_location(lake_db), [make_bundle(tmp_path / "b", n_samples=5)])
    dbname = parse_location(lake_db).catalog.split()[0].split("=")[1]
    role = f"reader_{dbname}"
    postgres_server.psql(f"CREATE ROLE {role} LOGIN")
    postgres_server.psql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", dbname)
    reader = lake_db.replace("user=attnwatch", f"user={role}")
    assert run_user_sql(parse_location(reader), "SELECT count(*) AS n FROM results").n.tolist() == [24]
    with pytest.raises(Exception, match="(?i)permission denied"):
        ingest_paths(parse_location(reader), [make_bundle(tmp_path / "c", run_id="other", n_samples=5)])
    assert _count(lake_db, "SELECT count(*) FROM runs") == 1


def test_a_query_server_started_in_a_directory_since_removed_still_answers(lake_db, tmp_path, monkeypatch, capsys):
    """The user-SQL server processes are pooled (history.sql.server): one started while its first
    caller sat in a directory since removed (a fuzz case's) answered every later lake query with
    DuckDB's "Could not get working directory". Each query now runs in its caller's directory."""
    import os
    import shutil

    from attnwatch.history.sql import server

    ingest_paths(parse_location(lake_db), [make_bundle(tmp_path / "b", n_samples=5)])
    server.close_idle()  # no server started elsewhere: the next one starts in `gone`
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    assert cli_main(["--db", lake_db, "sql", "SELECT count(*) AS n FROM runs"]) == 0
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(gone)
    capsys.readouterr()
    assert cli_main(["--db", lake_db, "sql", "SELECT count(*) AS n FROM runs"]) == 0, capsys.readouterr().err
    assert os.getcwd() == str(tmp_path)
