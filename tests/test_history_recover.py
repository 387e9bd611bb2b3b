"""`attnwatch history recover` on each form of write-ahead log, through the real command: an intact
log, one cut in half, one whose last record is cut short, one of random bytes, an empty one, and
one whose checksum breaks in its second transaction. Recover must say exactly which transactions
it replayed and which it did not, exit 1 whenever any part of the log was not replayed, and leave
a history that opens and takes writes.

The log is one an older attnwatch left (tests/fault_env.py's --legacy-wal writer, killed before its
last COMMIT): two committed transactions, run-a's and run-b's, beside a file at the current schema
holding no run. What a damaged log still holds is decided by DuckDB's own replay of the same bytes
in a scratch copy (a plain ATTACH), independently of the code under test."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import fault_env
from conftest import REPO_ROOT
from fault_env import cli, inspect, killed_at, statement_count

sys.path.insert(0, str(REPO_ROOT))
from attnwatch.scripts.fault_check import Battery  # noqa: E402
from attnwatch.history.store.migrations import code_schema_version  # noqa: E402
from attnwatch.history.store.location import parse_location


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> tuple[Path, bytes, Battery]:
    """(a history file at the current schema with no run, the log beside it, the battery that made it)."""
    battery = Battery(tmp_path_factory.mktemp("battery"), random.Random(39))
    args = ["--legacy-wal", "ingest", *map(str, battery.bundles)]
    count = statement_count(killed_at(0, battery.fresh(schema=code_schema_version()), *args))
    db = battery.fresh(schema=code_schema_version())
    killed_at(count, db, *args)  # before run-c's COMMIT: run-a's and run-b's transactions rest in the log
    return db, db.with_name(db.name + ".wal").read_bytes(), battery


def _history(where: Path, legacy, log: bytes) -> Path:
    where.mkdir(parents=True)
    db = where / "history.duckdb"
    shutil.copy(legacy[0], db)
    db.with_name(db.name + ".wal").write_bytes(log)
    return db


def _duckdb_keeps(tmp_path: Path, legacy, log: bytes) -> set[str]:
    """The runs DuckDB's own replay of `log` gives (a scratch copy attached; nothing of attnwatch)."""
    db = _history(tmp_path / "oracle", legacy, log)
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"ATTACH '{db}' AS h (READ_ONLY)")
        return {r[0] for r in con.execute("SELECT run_id FROM h.runs").fetchall()}
    finally:
        con.close()


def _recover(db: Path):
    result = cli(db, "history", "recover")
    assert result.stderr == "", result.stderr
    assert not fault_env.other_paths(result.stdout, db), result.stdout
    return result


def _writable(db: Path, battery: Battery) -> None:
    from attnwatch.history.ingest.write import ingest_paths

    ingest_paths(parse_location(db), battery.bundles, deadline_s=30)
    assert sorted(inspect(db).runs) == ["run-a", "run-b", "run-c"]


def test_the_legacy_log_holds_two_committed_transactions(tmp_path, legacy):
    assert _duckdb_keeps(tmp_path, legacy, legacy[1]) == {"run-a", "run-b"}


def test_an_intact_log_is_replayed_whole(tmp_path, legacy):
    db = _history(tmp_path / "h", legacy, legacy[1])
    result = _recover(db)
    assert result.returncode == 0, result.stdout
    assert f"{db}.wal: {len(legacy[1])} bytes, 2 committed transaction(s)\n" in result.stdout
    assert "replayed transactions 1-2 of 2" in result.stdout and "every committed transaction was kept" in result.stdout
    assert "NOT replayed" not in result.stdout
    assert "runs the replay added: run-a, run-b" in result.stdout
    assert sorted(inspect(db).runs) == ["run-a", "run-b"]
    (backup,) = db.parent.glob("history.duckdb.recover-*")
    assert (backup / "history.duckdb.wal").read_bytes() == legacy[1]
    _writable(db, legacy[2])


def test_a_log_cut_in_half_says_which_transactions_were_not_replayed(tmp_path, legacy):
    log = legacy[1][: len(legacy[1]) // 2]
    kept = _duckdb_keeps(tmp_path, legacy, log)
    db = _history(tmp_path / "h", legacy, log)
    result = _recover(db)
    assert result.returncode == 1, result.stdout
    assert "every committed transaction was kept" not in result.stdout
    assert (
        f"{len(kept)} committed transaction(s), then " in result.stdout and "the log is cut off there" in result.stdout
    )
    assert "NOT replayed, so not in the history" in result.stdout
    assert set(inspect(db).runs) == kept
    assert (f"runs the replay added: {', '.join(sorted(kept))}" if kept else "the replay added no run") in result.stdout
    _writable(db, legacy[2])


def test_a_log_whose_last_record_is_cut_short_keeps_the_transactions_before_it(tmp_path, legacy):
    log = legacy[1][:-3]
    assert _duckdb_keeps(tmp_path, legacy, log) == {"run-a"}
    db = _history(tmp_path / "h", legacy, log)
    result = _recover(db)
    assert result.returncode == 1, result.stdout
    assert "1 committed transaction(s), then " in result.stdout
    assert "replayed transaction 1 of 1" in result.stdout and "runs the replay added: run-a" in result.stdout
    assert "NOT replayed, so not in the history (the backup keeps them): bytes " in result.stdout
    assert set(inspect(db).runs) == {"run-a"}
    _writable(db, legacy[2])


def test_a_log_of_random_bytes_is_set_aside_and_said_so(tmp_path, legacy):
    log = random.Random(39).randbytes(len(legacy[1]))
    assert _duckdb_keeps(tmp_path, legacy, log) == set()  # DuckDB ignores it without a word
    db = _history(tmp_path / "h", legacy, log)
    result = _recover(db)
    assert result.returncode == 1, result.stdout
    assert f"{len(log)} bytes that are not a DuckDB write-ahead log" in result.stdout
    assert f"NOT replayed, so not in the history (the backup keeps them): all {len(log)} bytes" in result.stdout
    assert "every committed transaction was kept" not in result.stdout
    assert not db.with_name(db.name + ".wal").exists()  # not left for DuckDB to append to
    (backup,) = db.parent.glob("history.duckdb.recover-*")
    assert (backup / "history.duckdb.wal.unreplayable").read_bytes() == log
    assert inspect(db).runs == {}
    _writable(db, legacy[2])


def test_an_empty_log_is_nothing_to_replay(tmp_path, legacy):
    db = _history(tmp_path / "h", legacy, b"")
    result = _recover(db)
    assert result.returncode == 0, result.stdout
    assert "an empty write-ahead log (0 bytes), nothing to replay; nothing to recover" in result.stdout
    assert not list(db.parent.glob("history.duckdb.recover-*"))


def test_a_checksum_broken_in_the_second_transaction_keeps_the_first(tmp_path, legacy):
    log = bytearray(legacy[1])
    at = len(log) * 3 // 4  # inside run-b's transaction, the second half of the log
    log[at : at + 32] = bytes(b ^ 0xFF for b in log[at : at + 32])
    db = _history(tmp_path / "h", legacy, bytes(log))
    result = _recover(db)
    assert result.returncode == 1, result.stdout
    assert "replayed transaction 1 of 2" in result.stdout and "transaction 2 is damaged" in result.stdout
    assert "NOT replayed, so not in the history (the backup keeps them): transaction 2 of 2" in result.stdout
    assert "runs the replay added: run-a" in result.stdout
    assert set(inspect(db).runs) == {"run-a"}
    _writable(db, legacy[2])


def test_a_history_another_process_holds_is_left_alone_naming_that_process(tmp_path, legacy):
    db = _history(tmp_path / "h", legacy, legacy[1])
    code = (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX); "
        "print('held', flush=True); time.sleep(600)"
    )  # the POSIX lock DuckDB's writers take
    holder = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = cli(db, "history", "recover")
    finally:
        holder.kill()
        holder.wait()
    err = result.stderr.strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"{db}: the history is held by process {holder.pid} (python" in err, err
    assert db.with_name(db.name + ".wal").read_bytes() == legacy[1]
    assert not list(db.parent.glob("history.duckdb.recover-*"))
