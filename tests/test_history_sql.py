"""User SQL: DuckDB's own configuration refuses hostile statements, with no side effects."""

from __future__ import annotations

import hashlib
import io
import json

import pandas as pd
import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.errors import HistoryNotFoundError, QueryError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.sql.query import run_user_sql, schema_overview
from attnwatch.history.store.location import parse_location


@pytest.fixture
def history(tmp_path, db_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", n_samples=20)])
    return db_path


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hostile(target_dir):
    """(statement, fragment of DuckDB's refusal) — each must be refused by configuration."""
    out = target_dir / "stolen"
    return [
        ("INSERT INTO runs (run_id) VALUES ('x')", "read-only"),
        ("CREATE TABLE evil (x INTEGER)", "read-only"),
        ("DROP TABLE results", "read-only"),
        ("DELETE FROM results", "read-only"),
        ("UPDATE alerts SET status = 'resolved'", "read-only"),
        ("CREATE VIEW v AS SELECT 1", "read-only"),
        (f"COPY results TO '{out}.csv'", "file system operations are disabled"),
        (f"COPY (SELECT * FROM runs) TO '{out}.parquet' (FORMAT parquet)", "file system operations are disabled"),
        (f"EXPORT DATABASE '{out}_dir'", "file system operations are disabled"),
        (f"ATTACH '{out}.duckdb' AS other", "file system operations are disabled"),
        ("SELECT * FROM read_csv('/etc/passwd')", "file system operations are disabled"),
        ("SELECT * FROM read_text('/etc/hostname')", "file system operations are disabled"),
        ("SELECT * FROM glob('/*')", "file system operations are disabled"),
        ("INSTALL httpfs", "file system"),
        ("LOAD httpfs", "disabled"),
        ("SET enable_external_access = true", "configuration has been locked"),
        ("SET memory_limit = '100GB'", "configuration has been locked"),
        ("RESET threads", "configuration has been locked"),
        ("PRAGMA threads = 64", "configuration has been locked"),
        ("SET lock_configuration = false", "configuration has been locked"),
    ]


def test_hostile_sql_is_refused_without_side_effects(history, tmp_path):
    before = _digest(history)
    for statement, refusal in _hostile(tmp_path):
        with pytest.raises(QueryError) as info:
            run_user_sql(parse_location(history), statement)
        assert refusal in str(info.value), (statement, str(info.value))
    assert _digest(history) == before
    assert not list(tmp_path.glob("stolen*"))
    counts = run_user_sql(
        parse_location(history), "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM results) AS results"
    )
    assert counts.iloc[0].tolist() == [1, 24]


def test_cli_refuses_hostile_sql_with_exit_2(history, tmp_path, capsys):
    assert cli_main(["--db", str(history), "sql", f"COPY runs TO '{tmp_path / 'x.csv'}'"]) == 2
    assert "file system operations are disabled" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_runaway_query_is_interrupted(history):
    with pytest.raises(QueryError, match="time limit"):
        run_user_sql(
            parse_location(history), "SELECT count(*) FROM range(1000000000000) t(i) WHERE i % 7 = 3", timeout_s=0.5
        )


def test_rows_are_capped_and_flagged(history):
    frame = run_user_sql(
        parse_location(history), "SELECT * FROM samples ORDER BY run_id, case_id, sample_index", max_rows=7
    )
    assert len(frame) == 7 and frame.attrs["truncated"] is True
    whole = run_user_sql(parse_location(history), "SELECT * FROM runs", max_rows=7)
    assert len(whole) == 1 and whole.attrs["truncated"] is False


def test_one_statement_per_query(history):
    with pytest.raises(QueryError, match="one statement"):
        run_user_sql(parse_location(history), "SELECT 1; SELECT 2")
    with pytest.raises(QueryError, match="no SQL"):
        run_user_sql(parse_location(history), "  ")


def test_typical_aggregate_matches_pandas(history):
    sql = "SELECT variant, median(median_us) AS median_us FROM case_series GROUP BY variant ORDER BY variant"
    frame = run_user_sql(parse_location(history), sql)
    raw = run_user_sql(parse_location(history), "SELECT variant, median_us FROM results WHERE status = 'ok'")
    expected = raw.groupby("variant")["median_us"].median().sort_index()
    assert frame["variant"].tolist() == expected.index.tolist()
    assert frame["median_us"].tolist() == pytest.approx(expected.tolist())


def test_schema_overview_lists_tables_views_and_types(history):
    overview = schema_overview(parse_location(history))
    kinds = overview.groupby("object")["kind"].first().to_dict()
    assert kinds["results"] == "table" and kinds["case_series"] == "view" and kinds["latest_main_runs"] == "view"
    types = overview[overview.object == "results"].set_index("column")["type"].to_dict()
    assert types["median_us"] == "DOUBLE" and types["gap_to_backends"] == "MAP(VARCHAR, DOUBLE)"


def test_missing_history_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "nope.duckdb"
    with pytest.raises(HistoryNotFoundError, match="no history here yet") as info:
        run_user_sql(parse_location(missing), "SELECT 1")
    assert str(info.value).startswith("nope.duckdb: ") and str(tmp_path) not in str(
        info.value
    )  # the dashboard's: no server path
    assert cli_main(["--db", str(missing), "sql", "SELECT 1"]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no history here yet" in err  # the command line names the history it was given, in full
    assert not missing.exists()


def test_cli_table_csv_json_parquet_file_and_stdin(history, tmp_path, capsys, monkeypatch):
    sql = "SELECT variant, count(*) AS cases FROM results GROUP BY variant ORDER BY variant"
    assert cli_main(["--db", str(history), "sql", sql]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["variant", "cases"] and table[2].split() == ["cuda_wmma", "4"]
    assert table[-1] == "(6 rows)"

    assert cli_main(["--db", str(history), "sql", sql, "--format", "csv"]) == 0
    csv = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert csv["cases"].sum() == 24

    (tmp_path / "q.sql").write_text(sql)
    out = tmp_path / "r.json"
    assert (
        cli_main(["--db", str(history), "sql", "-f", str(tmp_path / "q.sql"), "--format", "json", "-o", str(out)]) == 0
    )
    assert sum(r["cases"] for r in json.loads(out.read_text())) == 24

    pq = tmp_path / "r.parquet"
    monkeypatch.setattr("sys.stdin", io.StringIO(sql))
    assert cli_main(["--db", str(history), "sql", "-", "--format", "parquet", "-o", str(pq)]) == 0
    assert pd.read_parquet(pq)["cases"].tolist() == [4] * 6


def test_table_format_escapes_control_characters(history, capsys):
    assert cli_main(["--db", str(history), "sql", "SELECT 'a' || chr(10) || chr(27) || '[31mb' AS t"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "a\\x0a\\x1b[31mb" in out


def test_show_caps_printed_rows(history, capsys):
    assert cli_main(["--db", str(history), "sql", "SELECT * FROM results", "--show", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "(24 rows, 21 not shown)" and len(out) == 2 + 3 + 1


def test_user_sql_waits_for_a_differently_configured_reader_in_this_process(history):
    """A dashboard read (plain read-only) and a sandboxed query can overlap in one server."""
    import threading

    from attnwatch.history.store.db import open_read

    opened, results = threading.Event(), []

    def reader():
        with open_read(parse_location(history)) as con:
            opened.set()
            con.execute("SELECT count(*) FROM range(30000000)").fetchone()  # hold it a moment

    thread = threading.Thread(target=reader)
    thread.start()
    opened.wait()
    results.append(run_user_sql(parse_location(history), "SELECT count(*) AS n FROM runs")["n"].iloc[0])
    thread.join()
    assert results == [1]


def test_history_commands_load_without_duckdb():
    """GPU runners have no duckdb: the CLI's ingest/sql/export modules must still import."""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    code = (
        "import sys; sys.modules['duckdb'] = None\n"
        "import argparse\n"
        "from attnwatch.cli.commands import ingest, sql, export\n"
        "p = argparse.ArgumentParser(); sub = p.add_subparsers()\n"
        "for m in (ingest, sql, export): m.register(sub)\n"
        "print('loaded')"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr


def test_cli_sql_defaults_match_the_library():
    from attnwatch.history.sql import query as sql_query
    from attnwatch.cli.commands import sql as sql_command

    assert sql_command.DEFAULT_MAX_ROWS == sql_query.DEFAULT_MAX_ROWS
    assert sql_command.DEFAULT_TIMEOUT_S == sql_query.DEFAULT_TIMEOUT_S
