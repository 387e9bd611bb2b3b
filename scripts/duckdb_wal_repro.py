"""Minimal reproduction of a DuckDB defect: a write-ahead log its own open cannot replay.

DuckDB alone, no attnwatch code. A table with a function DEFAULT (here `nextval('seq')`) is
checkpointed; a second process runs `ALTER TABLE t ADD COLUMN c VARCHAR` and exits before any
checkpoint (os._exit, as a kill -9 or a power cut would), leaving the ALTER in the log. The next
`duckdb.connect(file)` fails with

    INTERNAL Error: Failure while replaying WAL file "...": Calling
    DatabaseManager::GetDefaultDatabase with no default database set

and so does a read-only open. Then it shows the two ways around it that history.store.db and
history.store.recover use: ATTACH from an in-memory database replays the same log, and a writer
configured to checkpoint every commit without writing the log never leaves the ALTER there.
docs/upstream.md has the analysis and the text to report upstream.

    python scripts/duckdb_wal_repro.py [--workdir DIR]

Exit status 0 when the defect reproduces (and both ways around it work), 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

SETUP = [
    "CREATE SEQUENCE seq START 1",
    "CREATE TABLE t (id BIGINT DEFAULT nextval('seq'), x INTEGER)",
    "INSERT INTO t (x) VALUES (1)",
]
DDL = "ALTER TABLE t ADD COLUMN c VARCHAR"
CHILD = """
import duckdb, json, os, sys
con = duckdb.connect(sys.argv[1], config=json.loads(sys.argv[2]))
con.execute(sys.argv[3])
con.execute("INSERT INTO t (x, c) VALUES (2, 'after the alter')")
os._exit(0)  # no checkpoint, no clean close
"""


def make(path: Path, config: dict) -> None:
    """The checkpointed table, then a process that alters it and dies."""
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    for statement in SETUP:
        con.execute(statement)
    con.execute("CHECKPOINT")
    con.close()
    subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(config), DDL], check=True)


def try_open(path: Path) -> str:
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        return f"FAILS: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    rows = con.execute("SELECT count(*) FROM t").fetchone()[0]
    con.close()
    return f"opens, {rows} rows"


def try_attach(path: Path) -> str:
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"ATTACH '{path}' AS h")
        rows = con.execute("SELECT count(*) FROM h.t").fetchone()[0]
        con.execute("CHECKPOINT h")
        con.execute("DETACH h")
        return f"replays, {rows} rows"
    except duckdb.Error as exc:
        return f"FAILS: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    finally:
        con.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="duckdb-wal-repro-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"DuckDB {duckdb.__version__}, Python {sys.version.split()[0]}")

    plain = workdir / "plain.duckdb"
    make(plain, {})
    opened = try_open(plain)
    print(f"1. ALTER left in the log, then duckdb.connect(file): {opened}")
    attached = try_attach(plain)
    print(f"2. the same file attached to an in-memory database: {attached}")
    after = try_open(plain)
    print(f"3. duckdb.connect(file) after that checkpoint: {after}")

    durable = workdir / "durable.duckdb"
    make(durable, {"wal_autocheckpoint": "0KB", "auto_checkpoint_skip_wal_threshold": 0})
    print(f"4. the ALTER made with wal_autocheckpoint=0KB, auto_checkpoint_skip_wal_threshold=0: {try_open(durable)}")

    reproduced = opened.startswith("FAILS") and "GetDefaultDatabase" in opened
    print("reproduced" if reproduced else "NOT reproduced with this DuckDB version")
    return 0 if reproduced else 1


if __name__ == "__main__":
    sys.exit(main())
