"""What user SQL gives back (issue 25 and 26): the byte cap at its edge, duplicate column names,
nested columns in Parquet, the schema browser's columns, and a lock held too long, each through
history.sql.query and `attnwatch sql`."""

from __future__ import annotations

import io
import subprocess
import sys
from contextlib import contextmanager

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import attnwatch.history.sql.query as history_sql
from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.errors import HistoryError, LockTimeoutError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.sql.query import run_user_query, run_user_sql, schema_overview, unique_names
from attnwatch.history.sql.sandbox import SqlLimits
from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import parse_location

WIDE = "SELECT " + ", ".join(f"range + {i} AS c{i}" for i in range(57)) + " FROM range(20000)"  # 625 batches of 32


@pytest.fixture
def history(tmp_path, db_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", n_samples=5)])
    return db_path


def test_the_byte_cap_counts_result_bytes_at_its_edge(history, capsys):
    """A result of exactly the cap is kept whole; one byte less cuts it, and the CLI says so. (The
    cap used to count each 32-row batch's framing too, and refused this result at its own size.)"""
    size = run_user_sql(parse_location(history), WIDE, max_bytes=2**30).attrs["bytes"]
    assert 20000 * 57 * 8 <= size < 20000 * 57 * 8 * 1.05  # the values, their validity bits
    exact = run_user_sql(parse_location(history), WIDE, max_bytes=size)
    assert len(exact) == 20000 and exact.attrs["cut"] is None and exact.attrs["bytes"] == size
    assert cli_main(["--db", str(history), "sql", WIDE, "--max-bytes", str(size - 1), "--show", "1"]) == 0
    out = capsys.readouterr()
    kept = int(out.out.strip().splitlines()[-1].strip("(").split()[0])
    assert 19900 < kept < 20000, out.out[-200:]
    assert f"note: result cut at --max-bytes {(size - 1) / 2**20:g} MiB ({kept} rows kept)" in out.err


def test_duplicate_column_names_are_shown_renamed(history, capsys):
    frame = run_user_sql(parse_location(history), "SELECT 1 AS x, 2 AS x, 3 AS x_1, 4 AS X")
    assert list(frame.columns) == ["x", "x_2", "x_1", "X_3"] and frame.iloc[0].tolist() == [1, 2, 3, 4]
    assert frame.attrs["renamed"] == {"x_2": "x", "X_3": "X"}
    assert cli_main(["--db", str(history), "sql", "SELECT 1 AS x, 2 AS x"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].split() == ["x", "x_1"] and out.out.splitlines()[2].split() == ["1", "2"]
    assert "note: columns renamed to be unique: x_1 (a second x)" in out.err
    assert cli_main(["--db", str(history), "sql", "SELECT 1 AS x, 2 AS x", "--format", "json"]) == 0
    assert pd.read_json(io.StringIO(capsys.readouterr().out)).iloc[0].tolist() == [1, 2]
    assert unique_names(["a", "b"]) == (["a", "b"], {})


def test_parquet_keeps_nested_columns(history, tmp_path, capsys):
    """`SELECT * FROM results` has MAP and LIST columns that pandas holds as Python objects; the
    Parquet comes from DuckDB's Arrow result and keeps their types. CSV of the same rows parses."""
    result = run_user_query(parse_location(history), "SELECT * FROM results ORDER BY case_id")
    back = pq.read_table(io.BytesIO(history_sql.to_parquet(result.table)))
    assert back.schema.field("gap_to_backends").type == result.table.schema.field("gap_to_backends").type
    assert pa.types.is_map(back.schema.field("gap_to_backends").type)
    assert back.equals(result.table)
    out = tmp_path / "r.parquet"
    assert cli_main(["--db", str(history), "sql", "SELECT * FROM results", "--format", "parquet", "-o", str(out)]) == 0
    assert pq.read_table(out).num_rows == 24
    assert cli_main(["--db", str(history), "sql", "SELECT * FROM results", "--format", "csv"]) == 0
    assert len(pd.read_csv(io.StringIO(capsys.readouterr().out))) == 24
    nowhere = tmp_path / "missing" / "r.parquet"
    assert cli_main(["--db", str(history), "sql", "SELECT 1", "--format", "parquet", "-o", str(nowhere)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "cannot write the result: No such file or directory" in line


def test_the_schema_overview_lists_the_columns_a_view_returns(history):
    """A file's information_schema can keep a view's columns as of its creation (latest_results: 72)
    until a write refreshes them, while its `SELECT d.*` returns the columns added since: the
    browser shows what a query returns."""
    overview = schema_overview(parse_location(history))
    for view in overview[overview.kind == "view"].object.unique():
        returned = run_user_sql(parse_location(history), f"SELECT * FROM {view} LIMIT 0")
        shown = overview[overview.object == view].sort_values("position")
        assert shown["column"].tolist() == list(returned.columns), view
    latest = overview[overview.object == "latest_results"]
    assert len(latest) == len(run_user_sql(parse_location(history), "SELECT * FROM latest_results").columns)


def _view_columns(db) -> dict[str, tuple[int, int]]:
    """view -> (columns information_schema lists, columns a query of it returns)."""
    with open_read(parse_location(db)) as con:
        views = [v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
        return {
            v: (
                con.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = ?", [v]).fetchone()[0],
                len(con.execute(f'DESCRIBE SELECT * FROM "{v}"').fetchall()),
            )
            for v in views
        }


def _assert_catalogue_matches(db) -> None:
    columns = _view_columns(db)
    assert columns["latest_results"][1] > 72
    assert {v: n for v, (n, _) in columns.items()} == {v: n for v, (_, n) in columns.items()}


def test_information_schema_lists_the_columns_a_view_returns(tmp_path, history, monkeypatch):
    """On a file, DuckDB records a view's columns when it is created; the views that later
    migrations widened are created again (history.store.migrations.refresh_view_columns): in a new
    history, in one migrated from schema N-1, and in a current one whose views are stale."""
    from attnwatch.history.store import migrations
    from attnwatch.history.store.db import open_write
    from old_history import history_at_version

    _assert_catalogue_matches(history)
    older = history_at_version(tmp_path / "older.duckdb", migrations.code_schema_version() - 1, tmp_path / "scratch")
    assert cli_main(["--db", str(older), "migrate"]) == 0
    _assert_catalogue_matches(older)
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "refresh_view_columns", lambda con, label: [])
        ingest_paths(parse_location(tmp_path / "stale.duckdb"), [make_bundle(tmp_path / "b2", n_samples=5)])
    assert _view_columns(tmp_path / "stale.duckdb")["latest_results"][0] == 72  # as DuckDB left it
    with open_write(parse_location(tmp_path / "stale.duckdb")):
        pass
    _assert_catalogue_matches(tmp_path / "stale.duckdb")


@contextmanager
def lock_held(path):
    """Another process with the history open for writing: DuckDB's lock, which readers wait for."""
    code = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def assert_public(message: str, history, pid: int) -> None:
    """One line naming the history by its file name; no directory, binary or process id."""
    assert "\n" not in message and message.startswith(f"{history.name}: the history stayed busy"), message
    assert str(history.parent) not in message and sys.executable not in message, message
    assert str(pid) not in message and "PID" not in message, message


def test_a_lock_held_too_long_is_one_line_without_paths_or_pid_on_the_dashboard(history, monkeypatch, capsys):
    """The dashboard's SQL page (run_user_sql) names neither the server's paths nor its processes;
    `attnwatch sql`, whose user named the history, names it in full and the process holding it."""
    with lock_held(history) as pid:
        with pytest.raises(LockTimeoutError) as info:
            run_user_sql(parse_location(history), "SELECT 1", lock_wait_s=0.5)
        assert_public(str(info.value), history, pid)
        monkeypatch.setattr(history_sql, "DEFAULTS", SqlLimits(lock_wait_s=0.5))
        assert cli_main(["--db", str(history), "sql", "SELECT 1"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(
            f"attnwatch sql: error: {history}: the history stayed busy for more than 0.5 s: held by process {pid} ("
        ), line
        assert "PID" not in line and sys.executable not in line, line


def test_a_query_error_naming_the_history_names_its_file_only(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(HistoryError) as info:  # not a query's fault: the file is no history (history.store.db)
        run_user_sql(parse_location(junk), "SELECT 1")
    assert str(info.value).startswith("junk.duckdb: ") and str(tmp_path) not in str(info.value)
