"""Faults of a history file, with real `attnwatch` subprocesses: kill -9, a full disk (a file-size
limit, and a real tmpfs where one can be mounted), read-only, forbidden, busy, malformed input;
and a file DuckDB cannot replay, recovered (its log intact, or damaged and set aside).

The fast part of scripts/fault_check.py (which runs hundreds of trials; docs/benchmarks/history.md has
its table): after each fault the file opens with DuckDB alone, holds every run whose ingest said
"inserted" and no half-written one, and takes writes again; a failing command says so in one
line (no traceback, no PID, no binary path).
"""

from __future__ import annotations

import random
import sys

import duckdb
import pytest

import fault_env
import tmpfs_disk
from conftest import REPO_ROOT
from fault_env import cli, inspect, killed_at, one_line_error

sys.path.insert(0, str(REPO_ROOT))
from attnwatch.scripts.fault_check import TMPFS_STAGES, Battery  # noqa: E402
from attnwatch.scripts.fault_trials import RUNS, Tally  # noqa: E402


@pytest.fixture
def battery(tmp_path) -> Battery:
    return Battery(tmp_path / "battery", random.Random(25))


def held(tally: Tally) -> None:
    assert tally.trials > 0
    assert tally.failures == [], "\n".join(tally.failures)


def test_kill_9_at_statements_of_a_first_ingest_and_of_the_last_migration(battery):
    first, later = Tally("first ingest"), Tally("at schema N-1")
    from attnwatch.history.store.migrations import code_schema_version

    battery.kill_at_statements(first, None, sample=3)
    battery.kill_at_statements(later, code_schema_version() - 1, sample=3)
    held(first)
    held(later)


def test_kill_9_at_random_times_and_concurrent_ingests(battery):
    """The battery's two kinds not tried at fixed points: a first ingest killed after a random
    delay, and 4 ingest processes at once into one new history."""
    killed, concurrent = Tally("kill -9 at a random time"), Tally("concurrent")
    battery.kill_at_random_times(killed, 2)
    battery.concurrent(concurrent, 1)
    held(killed)
    held(concurrent)


def test_disk_full_at_every_stage_of_an_ingest_loses_nothing_reported(battery):
    first, later = Tally("first ingest"), Tally("later ingest")
    battery.disk_full(first, seed_runs=0, steps=3)
    battery.disk_full(later, seed_runs=1, steps=2)
    held(first)
    held(later)


def test_disk_full_is_one_line_naming_the_run_it_stopped_at(battery):
    db = battery.fresh(seed_runs=1)
    result = cli(db, "ingest", *map(str, battery.bundles[1:]), preexec=fault_env.file_size_limit(db.stat().st_size))
    assert one_line_error(result) is None, result.stderr
    assert result.stderr.startswith(f"attnwatch ingest: error: {db}: the disk is full")
    assert "while storing run run-b, after 0 run(s) of this ingest were stored" in result.stderr
    assert "inserted" not in result.stdout
    assert sorted(inspect(db).runs) == [RUNS[0]]


def test_read_only_file_system(battery, tmp_path):
    why = fault_env.read_only_unavailable(tmp_path / "probe")
    if why:
        pytest.skip(why)
    tally = Tally("read-only")
    battery.read_only(tally)
    held(tally)


def test_permission_denied(battery):
    tally = Tally("permission")
    battery.permission(tally)
    held(tally)


def test_lock_held_is_one_line_naming_the_process_holding_it(battery):
    db = battery.fresh(seed_runs=1)
    tally = Tally("lock")
    battery.lock_held_once(tally, db, ["ingest", "--lock-timeout", "0.5", str(battery.bundles[1])])
    held(tally)


def test_an_unreplayable_wal_names_the_recovery_command_and_recover_keeps_every_committed_run(battery):
    bundles = [str(b) for b in battery.bundles[:2]]
    db = battery.fresh()
    count = fault_env.statement_count(killed_at(0, battery.fresh(), "--legacy-wal", "ingest", *bundles))
    killed_at(count, db, "--legacy-wal", "ingest", *bundles)  # before the second run's COMMIT, as the old code wrote
    with pytest.raises(duckdb.InternalException, match="GetDefaultDatabase"):
        duckdb.connect(str(db), read_only=True)

    refused = cli(db, "alerts", "list")
    assert one_line_error(refused) is None, refused.stderr
    assert str(db) in refused.stderr and f"attnwatch --db {db} history recover" in refused.stderr
    # `attnwatch sql` names the history in full as every command does (the dashboard's SQL page by
    # its file name only: history.sql.guard.public_text), and points to the command.
    queried = cli(db, "sql", "SELECT count(*) FROM runs")
    assert one_line_error(queried) is None, queried.stderr
    assert f"{db}: " in queried.stderr and f"attnwatch --db {db} history recover" in queried.stderr

    fixed = cli(db, "history", "recover")
    assert fixed.returncode == 0, fixed.stderr
    assert "every committed transaction was kept" in fixed.stdout
    backups = list(db.parent.glob("history.duckdb.recover-*"))
    assert len(backups) == 1 and {p.name for p in backups[0].iterdir()} == {"history.duckdb", "history.duckdb.wal"}
    assert inspect(db).runs == {RUNS[0]: 4}  # the first run was committed (in the log) before the kill
    assert battery.writable(db, 2) is None
    again = cli(db, "history", "recover")
    assert again.returncode == 0 and "nothing to recover" in again.stdout


def test_dashboard_shows_a_fault_without_paths(battery):
    from attnwatch.app.data.store import HistoryUnavailable, current_source, read_frame

    db = battery.fresh()
    killed_at(
        fault_env.statement_count(killed_at(0, battery.fresh(), "--legacy-wal", "ingest", str(battery.bundles[0]))),
        db,
        "--legacy-wal",
        "ingest",
        str(battery.bundles[0]),
    )
    with pytest.raises(HistoryUnavailable) as caught:
        read_frame(current_source(db), "SELECT count(*) FROM runs")
    text = str(caught.value)
    assert "attnwatch history recover" in text and str(db.parent) not in text and "PID" not in text


@pytest.mark.parametrize(
    "text, kind",
    [
        # (a process id above the kernel's largest, 2**22: no process here has it, so none is described)
        (
            'IO Error: Could not set lock on file "/srv/h.duckdb": Conflicting lock is held in /usr/bin/python3.11 (PID 4194305). '
            "See also https://duckdb.org/docs/stable/connect/concurrency",
            "LockTimeoutError",
        ),
        ('IO Error: Could not write file "/srv/h.duckdb.wal": No space left on device', "DiskFullError"),
        (
            'FATAL Error: Failed to create checkpoint because of error: Could not write file "/srv/h.duckdb": File too large',
            "DiskFullError",
        ),
        ('IO Error: Cannot open file "/srv/h.duckdb": Read-only file system', "ReadOnlyError"),
        ('IO Error: Cannot open file "/srv/h.duckdb": Permission denied', "AccessDeniedError"),
        (
            'INTERNAL Error: Failure while replaying WAL file "/srv/h.duckdb.wal": Calling DatabaseManager::GetDefaultDatabase '
            "with no default database set\nStack Trace:\n/srv/venv/lib/_duckdb.so(...)",
            "WalReplayError",
        ),
        (
            'IO Error: Failure while replaying WAL file "/srv/h.duckdb.wal": Corrupt WAL file: entry at byte position 56 '
            "computed checksum 1 does not match stored checksum 2",
            "WalReplayError",
        ),
    ],
)
def test_each_fault_is_one_line_naming_the_history_and_nothing_of_the_machine(text, kind):
    from attnwatch.history.store.faults import file_fault

    exc = (
        duckdb.InternalException
        if "INTERNAL" in text
        else duckdb.FatalException
        if "FATAL" in text
        else duckdb.IOException
    )(text)
    fault = file_fault(exc, "team/history.duckdb")
    assert type(fault).__name__ == kind
    line = str(fault)
    assert line.startswith("team/history.duckdb: ") and "\n" not in line
    assert "/srv" not in line and "PID" not in line and "python" not in line
    assert "team/history.duckdb" not in fault.reason
    if kind == "LockTimeoutError":  # the process holding the lock, by its id; the dashboard's reason leaves it out
        assert "held by process 4194305" in line and "4194305" not in fault.reason


def test_a_file_that_is_not_a_database_is_one_line_and_left_alone(tmp_path):
    from attnwatch.history.store.db import open_read, open_write
    from attnwatch.history.errors import HistoryError
    from attnwatch.history.store.location import parse_location

    db = tmp_path / "history.duckdb"
    db.write_bytes(b"")  # what a creation killed by an older attnwatch left
    for opener in (open_read, open_write):
        with pytest.raises(HistoryError, match=r"not a DuckDB database \(0 bytes\)"):
            with opener(parse_location(db)):
                pass
    assert db.read_bytes() == b""


# Bytes left free on the tmpfs, per stage: where the disk fills in the middle of the work (a run
# or a migration stored before it, the transaction at hand cut), as the battery's sweeps found.
TMPFS_FREE = {
    "first ingest": 3_000_000,
    "migration": 150_000,
    "later ingest": 300_000,
    "detect": 900_000,
    "alerts ack": 300_000,
}


@pytest.mark.parametrize("stage", sorted(TMPFS_FREE))
def test_a_real_full_disk_at_each_stage_loses_nothing_reported(battery, tmp_path, stage):
    assert sorted(TMPFS_FREE) == sorted(TMPFS_STAGES)
    why = tmpfs_disk.tmpfs_unavailable(tmp_path / "probe")
    if why:
        pytest.skip(why)
    # How much a stage writes moves with the schema and the code, so the free space is stepped down
    # from the value the sweep found until the disk fills; every trial on the way must hold too.
    for free in (TMPFS_FREE[stage], TMPFS_FREE[stage] // 4, 0):
        db, args, attempted = battery.tmpfs_stage(stage)
        size_before = db.stat().st_size if db.exists() else 0
        result = tmpfs_disk.on_full_tmpfs(db, free, *args)
        assert battery.tmpfs_held(db, stage, result, attempted) is None
        if result.returncode != 0:
            assert result.returncode == 2 and "the disk is full" in result.stderr, (result.returncode, result.stderr)
            break
    else:
        # Nothing refused even with no byte free: DuckDB wrote only into blocks the file already
        # had free (it reuses them), so the disk was never asked for more. The file shows it.
        assert db.stat().st_size <= size_before, f"{stage}: the file grew on a full disk without an error"


def test_malformed_inputs_are_refused_in_one_line_and_change_nothing(battery):
    tally = Tally("malformed")
    # a sample: each rule has its in-process test in test_history_bad_input.py / test_series_identity.py
    battery.malformed(tally, names=["truncated file", "a foreign repository", "a hostile name: right-to-left override"])
    held(tally)
    assert tally.trials == 3
    assert battery.crashed_stored() is None


def test_recover_sets_a_damaged_log_aside_and_says_what_was_not_kept(battery):
    """The fallback: a log neither DuckDB's open nor an attached replay can read (a checksum broken)."""
    db = battery.fresh(seed_runs=1)
    args = ["--legacy-wal", "ingest", *map(str, battery.bundles[1:])]
    killed_at(fault_env.statement_count(killed_at(0, battery.fresh(seed_runs=1), *args)), db, *args)
    wal = db.with_name(db.name + ".wal")
    data = bytearray(wal.read_bytes())  # run-b's transaction, committed in the log only
    middle = len(data) // 3
    data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
    wal.write_bytes(data)
    damaged = bytes(data)

    refused = cli(db, "sql", "SELECT count(*) FROM runs")
    assert one_line_error(refused) is None, refused.stderr
    assert "write-ahead log is damaged" in refused.stderr and "history recover" in refused.stderr
    assert "defect" not in refused.stderr  # not the DuckDB defect whose recovery keeps everything

    fixed = cli(db, "history", "recover")
    assert fixed.returncode == 1, fixed.stderr
    assert "1 committed transaction(s)" in fixed.stdout and "transaction 1 is damaged (a checksum" in fixed.stdout
    assert "NOT replayed, so not in the history (the backup keeps them): transaction 1 of 1" in fixed.stdout
    assert "every committed transaction was kept" not in fixed.stdout
    assert not fault_env.other_paths(fixed.stdout, db), fixed.stdout
    assert not wal.exists()
    (backup,) = db.parent.glob("history.duckdb.recover-*")
    assert (backup / "history.duckdb.wal").read_bytes() == damaged
    assert inspect(db).runs == {RUNS[0]: 4}  # what the last checkpoint held
    assert battery.writable(db, 3) is None
