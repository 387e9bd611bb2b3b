"""Bringing a history written by an older attnwatch up to date: `history.store.db.upgrade`, the
`attnwatch migrate` command, and the dashboard doing it on opening (readers never migrate)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from contextlib import contextmanager

import duckdb
import pytest

from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import open_read, open_write, schema_version, upgrade
from attnwatch.history.errors import HistoryNotFoundError, LockTimeoutError
from attnwatch.history.store.migrations import code_schema_version
from old_history import history_at_version
from test_app_pages import open_page, texts
from attnwatch.history.store.location import parse_location

LATEST = code_schema_version()


def _views(db_path) -> set[str]:
    with open_read(parse_location(db_path)) as con:
        return {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}


@contextmanager
def read_only_holder(db_path):
    """Another process holding a read-only connection: DuckDB then refuses any writer."""
    code = textwrap.dedent(f"""
        import sys, duckdb
        con = duckdb.connect({str(db_path)!r}, read_only=True)
        print("ready", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_upgrade_applies_what_is_pending_once(tmp_path, db_path):
    history_at_version(db_path, 2, tmp_path)
    assert "ncu_roofline" not in _views(db_path)
    assert schema_version(parse_location(db_path)) == (2, LATEST)
    assert upgrade(parse_location(db_path)) == list(range(3, LATEST + 1))
    assert "ncu_roofline" in _views(db_path)
    assert upgrade(parse_location(db_path)) == []
    assert schema_version(parse_location(db_path)) == (LATEST, LATEST)


def test_a_current_history_is_checked_without_taking_the_write_lock(tmp_path, db_path):
    with open_write(parse_location(db_path)):
        pass
    with read_only_holder(db_path):
        with pytest.raises(LockTimeoutError):  # what a writer gets meanwhile
            with open_write(parse_location(db_path), deadline_s=0.5):
                pass
        assert upgrade(parse_location(db_path), deadline_s=0.5) == []


def test_upgrade_of_a_missing_history_names_the_file(tmp_path):
    missing = tmp_path / "none.duckdb"
    with pytest.raises(HistoryNotFoundError, match="none.duckdb"):
        upgrade(parse_location(missing))
    assert not missing.exists()


def test_migrate_command_checks_then_applies(tmp_path, db_path, capsys):
    history_at_version(db_path, 2, tmp_path)
    assert cli_main(["migrate", "--check"]) == 1
    assert f"schema 2, this attnwatch {LATEST} (behind: {LATEST - 2} migration(s) pending)" in capsys.readouterr().out
    assert cli_main(["migrate"]) == 0
    assert f"{db_path}: found at schema 2, left at schema {LATEST} (applied 003" in capsys.readouterr().out
    assert cli_main(["migrate", "--check"]) == 0
    assert cli_main(["migrate"]) == 0
    assert f"found at schema {LATEST}, left at schema {LATEST} (nothing to apply)" in capsys.readouterr().out


def test_migrate_command_on_a_missing_history_fails_clearly(tmp_path, capsys):
    missing = tmp_path / "none.duckdb"
    assert cli_main(["--db", str(missing), "migrate"]) == 2
    assert str(missing) in capsys.readouterr().err
    assert not missing.exists()


def test_dashboard_brings_an_old_history_up_to_date_and_says_so(tmp_path, monkeypatch):
    db = history_at_version(tmp_path / "old.duckdb", 2, tmp_path)
    # Said on the first page view only: afterwards the file is current and there is nothing to say.
    at = open_page(db, monkeypatch, "views/push.py")
    assert any(f"was brought up to schema {LATEST} on opening" in c for c in texts(at, "caption"))
    assert "ncu_roofline" in _views(db)
    at = open_page(db, monkeypatch, "views/kernel.py")
    assert not [w for w in texts(at, "warning") if "could not" in w]


def test_dashboard_that_cannot_upgrade_warns_and_still_reads(tmp_path, monkeypatch):
    db = history_at_version(tmp_path / "old.duckdb", 2, tmp_path)
    with read_only_holder(db):
        at = open_page(db, monkeypatch)
        warning = next(w for w in texts(at, "warning") if "could not be brought up" in w)
        assert "attnwatch migrate" in warning and "busy" in warning
        assert str(tmp_path) not in warning and "PID" not in warning  # no machine path on a page
    assert schema_version(parse_location(db)) == (2, LATEST)


def test_dashboard_on_a_history_from_a_newer_attnwatch_says_so_and_changes_nothing(tmp_path, monkeypatch):
    db = tmp_path / "newer.duckdb"
    with open_write(parse_location(db)) as con:
        con.execute("INSERT INTO schema_migrations VALUES (999, 'from_the_future', now() AT TIME ZONE 'UTC', 'x')")
    at = open_page(db, monkeypatch)
    warning = next(w for w in texts(at, "warning") if "schema version 999" in w)
    assert "upgrade attnwatch" in warning and "attnwatch migrate" not in warning
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*), max(version) FROM schema_migrations").fetchone() == (LATEST + 1, 999)
    finally:
        con.close()


CATALOG = (
    "SELECT 'column', table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable "
    "FROM information_schema.columns WHERE table_schema = 'main' "
    "UNION ALL SELECT 'view', view_name || ' ' || sql FROM duckdb_views() WHERE NOT internal "
    "UNION ALL SELECT 'constraint', table_name || ' ' || constraint_text FROM duckdb_constraints() "
    "UNION ALL SELECT 'index', index_name || ' ' || sql FROM duckdb_indexes() "
    "UNION ALL SELECT 'migration', version || ' ' || name || ' ' || checksum FROM schema_migrations "
    "ORDER BY 1, 2"
)


def test_a_new_history_takes_every_migration_in_one_transaction_and_the_same_schema(tmp_path):
    """A new file (made under a temporary name, linked only whole) is migrated in one transaction:
    one applied_at for every migration (now() is the transaction's start); its catalogue is the one
    migration by migration gives an existing file."""
    from attnwatch.history.store.db import DURABLE_WRITES
    from attnwatch.history.store.migrations import migrate

    new = tmp_path / "new.duckdb"
    with open_write(parse_location(new)):
        pass
    stepwise = duckdb.connect(str(tmp_path / "stepwise.duckdb"), config=dict(DURABLE_WRITES))
    try:
        assert migrate(stepwise, "stepwise") == list(range(1, LATEST + 1))
        expected = stepwise.execute(CATALOG).fetchall()
        assert stepwise.execute("SELECT count(DISTINCT applied_at) FROM schema_migrations").fetchone()[0] > 1
    finally:
        stepwise.close()
    with open_read(parse_location(new)) as con:
        assert con.execute(CATALOG).fetchall() == expected
        assert con.execute("SELECT count(*), count(DISTINCT applied_at) FROM schema_migrations").fetchone() == (
            LATEST,
            1,
        )


def test_a_failing_migration_of_a_new_file_leaves_nothing_recorded(tmp_path):
    from attnwatch.history.errors import MigrationError
    from attnwatch.history.store.migrations import MIGRATIONS_DIR, migrate

    shipped = tmp_path / "migrations"
    shipped.mkdir()
    first = sorted(MIGRATIONS_DIR.glob("*.sql"))[0]
    (shipped / first.name).write_text(first.read_text())
    (shipped / "002_broken.sql").write_text("CREATE TABLE broken (x NO_SUCH_TYPE);\n")
    con = duckdb.connect(str(tmp_path / "new.duckdb"))
    try:
        with pytest.raises(MigrationError, match="migration 002_broken failed"):
            migrate(con, "new.duckdb", shipped, new_file=True)
        tables = {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert tables == set(), tables  # not even the bookkeeping table: the one transaction rolled back
    finally:
        con.close()
