"""User SQL bounded in every resource (issue 15): spill, memory, result size, errors, server paths.

Each statement of the issue is run as a user runs it: through history.sql.query, `attnwatch sql` and,
in tests/test_app_sql.py, the dashboard's SQL page. Memory is measured as the peak RSS growth of
a separate process that asks (tests/sql_probe.py), so this test process is never at risk.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

import attnwatch.history.sql.query as history_sql
from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from conftest import REPO_ROOT
from attnwatch.history.errors import QueryError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.sql.query import run_user_sql
from attnwatch.history.sql.guard import denied_names, named_identifiers, scrub_paths
from attnwatch.history.sql.sandbox import SqlLimits, size_bytes
from sql_probe import (
    BIG_SORT,
    ERROR_MID_STREAM,
    HUGE_CONSTANT,
    MID_STREAM_SAYS,
    PROBE_GROWTH_MIB,
    WIDE_ROWS,
    DiskWatch,
    catalogue_statements,
    probe,
)
from attnwatch.history.store.location import parse_location

MIB = 2**20


@pytest.fixture
def history(tmp_path, db_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", n_samples=20)])
    return db_path


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """The system temp directory pointed into this test's tmp_path, so every spill is seen."""
    root = tmp_path / "systemp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


# --- spill: bounded, and in a private directory, not beside the history -------------------------


def _assert_spill_bounded(watch: DiskWatch, history: Path, private_tmp: Path, message: str):
    assert watch.peak <= size_bytes(SqlLimits().temp_limit) + 32 * MIB, f"spilled {watch.peak / MIB:.0f} MiB"
    assert not (history.parent / (history.name + ".tmp")).exists(), "spilled beside the history"
    assert list(private_tmp.iterdir()) == [], "the private temp directory was left behind"
    assert "temporary disk space" in message and "256MiB" in message, message


@pytest.mark.slow
def test_a_big_sort_spills_at_most_the_limit_in_a_private_directory(history, tmp_path, private_tmp):
    with DiskWatch(tmp_path) as watch, pytest.raises(QueryError) as info:
        run_user_sql(parse_location(history), BIG_SORT, memory_limit="64MB", timeout_s=60)
    _assert_spill_bounded(watch, history, private_tmp, str(info.value))


@pytest.mark.slow
def test_cli_big_sort_is_refused_at_the_spill_limit(history, tmp_path, private_tmp, monkeypatch, capsys):
    monkeypatch.setattr(history_sql, "DEFAULTS", SqlLimits(memory_limit="64MB"), raising=False)
    with DiskWatch(tmp_path) as watch:
        code = cli_main(["--db", str(history), "sql", BIG_SORT, "--timeout", "60"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    _assert_spill_bounded(watch, history, private_tmp, err)


# --- memory: the asking process stays small; the query's process is bounded by the kernel -------


@pytest.mark.slow
def test_wide_rows_are_cut_at_the_byte_cap_without_growing_the_cli(history):
    seen = probe("cli", history, WIDE_ROWS)
    assert seen["exit"] == 0 and "cut at --max-bytes 64 MiB" in seen["stderr"], seen
    assert seen["growth_mib"] < PROBE_GROWTH_MIB, seen


@pytest.mark.slow
def test_a_huge_constant_is_one_line_and_bounded_in_the_cli(history):
    seen = probe("cli", history, HUGE_CONSTANT)
    lines = seen["stderr"].strip().splitlines()
    assert seen["growth_mib"] < PROBE_GROWTH_MIB, seen
    assert seen["exit"] == 2 and len(lines) == 1 and "Traceback" not in seen["stderr"], seen
    assert "of memory" in lines[0], seen


@pytest.mark.slow
def test_wide_rows_through_the_library_keep_to_the_cap(history):
    seen = probe("api", history, WIDE_ROWS)
    assert seen["outcome"] == "rows" and seen["cut"] == "bytes" and 0 < seen["rows"] < 10000, seen
    assert seen["growth_mib"] < PROBE_GROWTH_MIB, seen


def test_the_byte_cap_cuts_and_says_so(history):
    frame = run_user_sql(parse_location(history), "SELECT repeat('x', 1000) AS s FROM range(5000)", max_bytes=100_000)
    assert frame.attrs["cut"] == "bytes" and frame.attrs["truncated"] is True
    assert 0 < len(frame) < 100
    whole = run_user_sql(parse_location(history), "SELECT repeat('x', 1000) AS s FROM range(50)", max_bytes=100_000)
    assert len(whole) == 50 and whole.attrs["cut"] is None


def test_a_row_larger_than_the_cap_is_refused(history):
    with pytest.raises(QueryError, match="one row of the result is larger"):
        run_user_sql(parse_location(history), "SELECT repeat('x', 300000) AS s", max_bytes=100_000)


# --- every error is one line ---------------------------------------------------------------------


def test_an_error_inside_the_result_stream_is_one_line(history, capsys):
    with pytest.raises(QueryError, match=MID_STREAM_SAYS):
        run_user_sql(parse_location(history), ERROR_MID_STREAM)
    assert cli_main(["--db", str(history), "sql", ERROR_MID_STREAM]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("attnwatch sql: error: ") and MID_STREAM_SAYS.search(line), line


@pytest.mark.parametrize(
    "sql, fmt, says",
    [
        ("SELECT union_value(k := 1) AS u", "table", "cannot be shown"),
        ("SELECT INTERVAL 1 MONTH AS i", "parquet", "no Parquet for this result"),
        ("SELECT INTERVAL 1 MONTH AS i", "json", "cannot write the result as json"),
    ],
)
def test_results_no_format_can_hold_are_one_line(history, tmp_path, capsys, sql, fmt, says):
    code = cli_main(["--db", str(history), "sql", sql, "--format", fmt, "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err


def test_an_error_message_names_no_server_path(history):
    with pytest.raises(QueryError) as info:
        run_user_sql(parse_location(history), "SELECT * FROM read_csv('/etc/passwd')")
    assert "/etc/passwd" not in str(info.value) and "<path>" in str(info.value)
    assert (
        scrub_paths('Cannot access directory "/root/.duckdb/x" (1.8 GiB/1.8 GiB used)')
        == 'Cannot access directory "<path>" (1.8 GiB/1.8 GiB used)'
    )


# --- server paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM duckdb_settings()",
        "SELECT current_setting('temp_directory')",
        "SELECT * FROM \"DuckDB_Settings\"() WHERE name LIKE '%dir%'",
        "SELECT * FROM system.main.duckdb_settings()",
        "SELECT current_setting/* c */('home_directory')",
        "SELECT value FROM pg_settings",
        "SELECT * FROM duckdb_databases()",
        "SELECT path FROM duckdb_databases",
        "PRAGMA database_list",
        "SELECT * FROM pragma_database_list",
        "SELECT * FROM duckdb_temporary_files()",
        "SELECT * FROM duckdb_extensions()",
        "CALL query('SELECT * FROM duckdb_settings()')",
        "SELECT * FROM query_table('duckdb_settings')",
        "SUMMARIZE SELECT * FROM duckdb_settings()",
    ],
)
def test_functions_that_show_server_paths_are_refused(history, sql):
    with pytest.raises(QueryError, match="is not available to user SQL"):
        run_user_sql(parse_location(history), sql)


def test_cli_settings_queries_reveal_no_path(history, tmp_path, capsys):
    for sql in ("SELECT * FROM duckdb_settings()", "SELECT current_setting('temp_directory')"):
        assert cli_main(["--db", str(history), "sql", sql]) == 2
        out = capsys.readouterr()
        assert "not available to user SQL" in out.err
        assert str(tmp_path) not in out.out + out.err and tempfile.gettempdir() not in out.out + out.err


@pytest.mark.slow
def test_no_catalogue_function_or_view_shows_a_server_path(history, tmp_path, private_tmp):
    """Run them all; each is refused or answers without a path of this machine in any cell."""
    secrets = [str(tmp_path), str(REPO_ROOT), sys.prefix] + [str(Path.home())] * (len(Path.home().parts) > 1)
    shown = []
    for sql in catalogue_statements():
        if sql.split()[-1].rstrip("()").lower() in (
            "checkpoint",
            "force_checkpoint",
            "enable_profiling",
            "enable_logging",
            "truncate_duckdb_logs",
        ):
            continue  # change state: refused by name (denied.toml) or on the read-only, locked connection
        try:
            text = run_user_sql(parse_location(history), sql, timeout_s=10).to_csv(index=False)
        except QueryError as exc:
            text = str(exc)
        leaked = [s for s in secrets if s in text]
        if leaked:
            shown.append((sql, leaked))
    assert shown == [], shown


def test_every_denied_name_has_a_reason_and_is_a_real_name():
    names = denied_names()
    con = duckdb.connect()
    try:
        known = {r[0].lower() for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
        known |= {r[0].lower() for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    finally:
        con.close()
    assert {"duckdb_settings", "current_setting", "duckdb_databases", "duckdb_extensions", "query"} <= set(names)
    assert all(entry.reason for entry in names.values())
    assert set(names) <= known, set(names) - known


def test_names_are_read_as_the_parser_reads_them():
    assert "duckdb_settings" in named_identifiers('SELECT * FROM "DuckDB_Settings"()')
    assert "current_setting" in named_identifiers("SELECT current_setting/*x*/('a')")
    assert "duckdb_settings" not in named_identifiers("SELECT 'duckdb_settings' AS s -- duckdb_settings")


def test_the_cli_defaults_come_from_the_library():
    from attnwatch.cli.commands import sql as sql_command

    assert sql_command.DEFAULT_MAX_BYTES == history_sql.DEFAULT_MAX_BYTES == 64 * MIB
