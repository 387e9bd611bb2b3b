"""The issue's hostile statements, and the tools that measure what they cost.

`probe(mode, db, sql)` runs `python tests/sql_probe.py api|cli|app HISTORY SQL`: one user query
asked the way a user asks it, in a process of its own, which prints one JSON line: growth_mib (ru_maxrss after the query minus before it: the growth of the
process that asked, which is what must stay bounded), outcome ('rows' / 'refused' / 'cli'),
and what the user saw (rows and the cut, the refusal, the CLI's exit code and stderr, the
dashboard's messages and any exception). The process limits its own address space to
SAFETY_LIMIT first, so a query that would take the machine's memory fails here instead.
`DiskWatch` samples the bytes allocated under a directory tree while a query spills.
Used by tests/test_history_sql_limits.py and tests/test_app_sql.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from attnwatch.history.store.location import parse_location

SAFETY_LIMIT = 8 * 2**30
ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20

BIG_SORT = "SELECT r, random() x FROM range(150000000) t(r) ORDER BY x"
WIDE_ROWS = "SELECT repeat('x',200000)||r::VARCHAR FROM range(10000) t(r)"
HUGE_CONSTANT = "SELECT repeat('x',10000000) FROM range(5000)"
# Fails at row 5,000, after DuckDB has started streaming (the list column fills its buffer):
# the error surfaces from Arrow's reader as OSError, which nothing caught before.
ERROR_MID_STREAM = (
    "SELECT range(r, r + 100) AS l, CASE WHEN r < 5000 THEN r ELSE error('boom at ' || r) END AS x "
    "FROM range(100000) t(r)"
)
# What the refusal says: the error, or (DuckDB 1.5.5, about 1 run in 30 with 2 threads) that another
# thread's error interrupted the query without DuckDB naming it.
MID_STREAM_SAYS = re.compile(r"boom at 5000|reported only 'Interrupted'")
# Peak RSS growth allowed to the process that asks: the 64 MiB byte cap as Arrow, as pandas and
# as output, plus slack. Fetching the whole result grew it by 3.7 GB (WIDE_ROWS) and 11 GB
# (HUGE_CONSTANT) before.
PROBE_GROWTH_MIB = 400
TIMEOUT_ENV = "SQL_PROBE_PAGE_TIMEOUT_S"  # probe()'s page_timeout_s, handed to the probing process


def probe(mode: str, db: Path, sql: str, page_timeout_s: float | None = None) -> dict:
    """What one query costs and shows, measured in a process of its own (module docstring);
    `page_timeout_s` replaces the SQL page's time limit (mode "app")."""
    env = {**os.environ, TIMEOUT_ENV: str(page_timeout_s)} if page_timeout_s else None
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), mode, str(db), sql],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def catalogue_statements(con=None) -> list[str]:
    """Every argument-free table function, pragma and system view `con` has (a plain DuckDB's when
    None), as a statement."""
    import duckdb

    own = con is None
    con = duckdb.connect() if own else con
    try:
        functions = con.execute(
            "SELECT DISTINCT function_name, function_type FROM duckdb_functions() "
            "WHERE function_type IN ('table', 'pragma') AND len(parameters) = 0"
        ).fetchall()
        views = con.execute("SELECT DISTINCT schema_name, view_name FROM duckdb_views() WHERE internal").fetchall()
    finally:
        if own:
            con.close()
    statements = [f"SELECT * FROM {name}()" if kind == "table" else f"PRAGMA {name}" for name, kind in functions]
    statements += [f"SELECT * FROM {schema}.{view}" for schema, view in views]
    return statements + ["SHOW DATABASES", "SHOW ALL TABLES", "DESCRIBE runs", "SHOW ALL", "SELECT current_database()"]


class DiskWatch:
    """The peak bytes allocated under a directory tree, sampled every 20 ms in a thread."""

    def __init__(self, root: Path):
        self.root, self.peak, self._stop = root, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            total = 0
            for folder, _, files in os.walk(self.root):
                for name in files:
                    try:
                        total += os.stat(os.path.join(folder, name)).st_blocks * 512
                    except OSError:
                        pass
            self.peak = max(self.peak, total)
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe_api(db: str, sql: str) -> dict:
    from attnwatch.history.errors import QueryError
    from attnwatch.history.sql.query import run_user_sql

    run_user_sql(parse_location(db), "SELECT 1")  # everything imported and started before the baseline
    before = peak_mib()
    try:
        frame = run_user_sql(parse_location(db), sql)
        seen = {"outcome": "rows", "rows": len(frame), "cut": frame.attrs.get("cut")}
    except QueryError as exc:
        seen = {"outcome": "refused", "message": str(exc)}
    return {"growth_mib": peak_mib() - before, **seen}


def probe_cli(db: str, sql: str) -> dict:
    from attnwatch.cli.main import main

    main(["--db", db, "sql", "SELECT 1"])
    before = peak_mib()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--db", db, "sql", sql, "--format", "csv", "--output", os.devnull])
    return {"growth_mib": peak_mib() - before, "outcome": "cli", "exit": code, "stderr": err.getvalue()}


def probe_app(db: str, sql: str) -> dict:
    from streamlit.testing.v1 import AppTest

    from attnwatch.app.data import sql_console

    if os.environ.get(TIMEOUT_ENV):
        sql_console.TIMEOUT_S = float(os.environ[TIMEOUT_ENV])
    os.environ["ATTNWATCH_DB"] = db
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120).run()
    at.switch_page("views/sql.py").run()
    at.text_area(key="sql_text").input("SELECT 1")
    at.button(key="sql_run").click().run()
    before = peak_mib()
    at.text_area(key="sql_text").input(sql)
    at.button(key="sql_run").click().run()
    return {
        "growth_mib": peak_mib() - before,
        "outcome": "app",
        "errors": [re.sub(r"\\(.)", r"\1", e.value) for e in at.error],
        "captions": [c.value for c in at.caption],
        "exceptions": [e.value for e in at.exception],
        "rows": len(at.dataframe[-1].value) if len(at.dataframe) else None,
    }


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (SAFETY_LIMIT, SAFETY_LIMIT))
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    mode, db, sql = sys.argv[1:4]
    result = {"api": probe_api, "cli": probe_cli, "app": probe_app}[mode](db, sql)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
