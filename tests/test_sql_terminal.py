"""What `attnwatch sql` sends to a terminal (issue 39): stored control characters escaped on
stdout and kept exact in a file, and a query that crashes its worker process reported in one
clean line, whatever DuckDB's C++ runtime wrote on the way down. Real subprocesses, as a shell
runs them, so the worker's own stderr is what the terminal would get."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from attnwatch.history.terminal_text import has_unsafe

REPO_ROOT = Path(__file__).resolve().parent.parent
PLANTED = "a\x1b[31mred\x00x\x85\u202e\x7f\rz"  # ESC sequence, NUL, C1 NEL, RLO, DEL, CR


def _sql(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + (os.pathsep + path if path else ""))
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), "sql", *args],
        capture_output=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def _planted(tmp_path: Path) -> Path:
    db = tmp_path / "history.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE notes (note VARCHAR)")
        con.execute("INSERT INTO notes VALUES (?)", [PLANTED])
    return db


def test_stored_control_characters_reach_stdout_escaped_in_every_format(tmp_path):
    """`sql --format csv` wrote ESC and NUL raw to the terminal; the table missed C1 and the
    bidirectional overrides; a column's name went out raw in the table's header."""
    db = _planted(tmp_path)
    query = 'SELECT note, note AS "h\x1b[2Jx" FROM notes'
    outs = {}
    for fmt in ("csv", "table", "json"):
        done = _sql(db, "--format", fmt, query, cwd=tmp_path)
        outs[fmt], err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 0, err
        assert not has_unsafe(outs[fmt]) and not has_unsafe(err), (fmt, outs[fmt])
        assert "\\x1b[31mred\\x00x" in outs[fmt] or "\\u001b[31mred\\u0000x" in outs[fmt], (fmt, outs[fmt])
    assert [row["note"] for row in json.loads(outs["json"])] == [PLANTED]  # JSON escapes keep the value
    assert "\\x0dz" in outs["csv"]  # a CR would overwrite the line


def test_csv_written_to_a_file_keeps_the_exact_bytes(tmp_path):
    db = _planted(tmp_path)
    done = _sql(db, "--format", "csv", "--output", str(tmp_path / "out.csv"), "SELECT note FROM notes", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    assert (tmp_path / "out.csv").read_bytes() == b"note\n" + PLANTED.encode() + b"\n"


def test_a_query_that_crashes_its_worker_is_one_clean_line(tmp_path):
    """`CALL enable_logging(storage='file', ...)` aborted DuckDB inside the worker, and C++'s
    "terminate called after throwing ..." with the directory's path reached the terminal raw,
    above the refusal. Now the worker's stderr goes to its private directory and the refusal
    line carries the gist, the path scrubbed; nothing is created where the query pointed."""
    db = _planted(tmp_path)
    logs = tmp_path / "logs"
    done = _sql(db, f"CALL enable_logging(storage='file', storage_path='{logs}')", cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2 and done.stdout == b"", err
    assert len(err.splitlines()) == 1 and err.startswith("attnwatch sql: error: "), err
    assert "terminate called" not in err and "what()" not in err and str(tmp_path) not in err, err
    assert not has_unsafe(err)
    assert not logs.exists()


def test_what_a_dying_worker_wrote_becomes_the_gist_of_its_line(tmp_path):
    from attnwatch.history.sql.worker import _child_said
    from attnwatch.history.store.location import parse_location

    said = tmp_path / "stderr.txt"
    said.write_bytes(
        b"terminate called after throwing an instance of 'duckdb::PermissionException'\n"
        b'  what():  {"exception_type":"Permission","exception_message":"Cannot access directory '
        b'\\"/srv/team/logs\\" - disabled\\u001b[2J"}\n'
    )
    assert (
        _child_said(said, parse_location("/srv/team/history.duckdb"))
        == 'Permission Error: Cannot access directory "<path>" - disabled\\x1b[2J'
    )
    said.write_bytes(b"Traceback (most recent call last):\n  File ...\nKeyError: 'x\x1b'\n")
    assert _child_said(said, parse_location("h.duckdb")) == "KeyError: 'x\\x1b'"
    assert _child_said(tmp_path / "none.txt", parse_location("h.duckdb")) == ""


def test_a_result_written_to_a_file_says_how_many_rows_went_where(tmp_path):
    """`sql --format parquet --output F` succeeded in silence (issue 44): nothing said a file was
    written. Every format now says its row count and the file, on stderr; stdout stays empty."""
    import pyarrow.parquet as pq

    db = _planted(tmp_path)
    query = "SELECT note, i FROM notes, range(3) t(i)"
    for fmt in ("parquet", "csv", "json", "table"):
        out = tmp_path / f"out.{fmt}"
        done = _sql(db, "--format", fmt, "--output", str(out), query, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout == b"", done.stderr
        assert done.stderr.decode().splitlines() == [f"wrote 3 rows ({fmt}) to {out}"], done.stderr
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 3
