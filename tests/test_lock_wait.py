"""Waiting for a history another process holds, with real processes: every wait scales with the one
setting ATTNWATCH_LOCK_WAIT_S (history/store/locks.py), a wait that runs out names the history in
full and the process holding it, and `migrate` says the schema it found and the schema it left,
also when another `migrate` ran beside it (it used to print "already at schema 1" for a history it
left at the latest schema, and to give up after a fixed 10 s read wait)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from bundle_factory import make_bundle
from fault_env import child_env, content
from old_history import history_at_version
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store import db as history_db
from attnwatch.history.store.migrations import code_schema_version

LATEST = code_schema_version()
LINE = re.compile(
    r"^(?P<db>.+): found at schema (?P<found>\d+), left at schema (?P<left>\d+) "
    r"\((?:applied (?P<applied>[0-9, ]+)|nothing to apply)\)(?P<meanwhile>; it was at schema (?P<seen>\d+) .*)?$"
)


def attnwatch(db: Path, *args: str, wait_s: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = child_env()
    env.pop("ATTNWATCH_LOCK_WAIT_S", None)
    if wait_s is not None:
        env["ATTNWATCH_LOCK_WAIT_S"] = wait_s
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextmanager
def held_for_writing(db: Path, release_after_s: float = 600):
    """Another process with the history open for writing (DuckDB's lock) until it exits."""
    code = (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); "
        "time.sleep(float(sys.argv[2])); c.close()"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(db), str(release_after_s)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("args", [["migrate"], ["ingest", "BUNDLE"], ["sql", "SELECT 1"]])
def test_a_wait_scales_with_the_setting_and_names_the_process_holding_the_history(tmp_path, args):
    db = tmp_path / "history.duckdb"
    history_at_version(db, LATEST - 1 if args == ["migrate"] else LATEST, tmp_path / "scratch")
    args = [str(make_bundle(tmp_path / "b", n_samples=5)) if a == "BUNDLE" else a for a in args]
    before = content(db)
    with held_for_writing(db) as holder:
        started = time.monotonic()
        result = attnwatch(db, *args, wait_s="1.5", timeout=40)
        waited = time.monotonic() - started
    err = result.stderr.strip()
    assert result.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{db}: the history stayed busy for more than " in err, err
    assert f"held by process {holder.pid} (python" in err and "ATTNWATCH_LOCK_WAIT_S" in err, err
    assert waited < 25, waited  # 1.5 s for writers (a reader waits a share of it), not 10 s or 60 s
    assert content(db) == before


def test_migrate_outwaits_a_holder_past_the_old_fixed_10_s(tmp_path):
    db = history_at_version(tmp_path / "history.duckdb", 1, tmp_path / "scratch")
    with held_for_writing(db, release_after_s=12):
        result = attnwatch(db, "migrate")  # the default setting: writers wait 60 s
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        f"{db}: found at schema 1, left at schema {LATEST} "
        f"(applied {', '.join(f'{v:03d}' for v in range(2, LATEST + 1))})"
    )


def test_two_concurrent_migrates_each_say_the_schema_they_found_and_left(tmp_path):
    db = history_at_version(tmp_path / "history.duckdb", 1, tmp_path / "scratch")
    env = child_env()
    env.pop("ATTNWATCH_LOCK_WAIT_S", None)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", str(db), "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300) for run in runs]
    applied = []
    for run, (out, err) in zip(runs, outputs):
        assert run.returncode == 0, err
        match = LINE.match(out.strip())
        assert match, out
        assert match["db"] == str(db) and int(match["left"]) == LATEST, out
        if match["applied"]:
            applied += [int(v) for v in match["applied"].split(", ")]
        else:  # the other one migrated it first: found at the latest schema
            assert int(match["found"]) == LATEST, out
        if match["meanwhile"]:
            assert int(match["seen"]) < int(match["found"]), out
    assert sorted(applied) == list(range(2, LATEST + 1))  # every migration applied once, by one of them


def test_migrate_says_when_another_migrated_the_history_while_it_waited(tmp_path, monkeypatch, capsys):
    """Deterministically: another `migrate` process runs to its end between this one's first read
    (schema 1) and its write connection."""
    db = history_at_version(tmp_path / "history.duckdb", 1, tmp_path / "scratch")
    connect = history_db.connect_with_retry

    def another_migrate_first(path, deadline_s, **kwargs):
        if not kwargs.get("read_only"):
            assert attnwatch(db, "migrate").returncode == 0
        return connect(path, deadline_s, **kwargs)

    monkeypatch.setattr(history_db, "connect_with_retry", another_migrate_first)
    assert cli_main(["--db", str(db), "migrate"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"{db}: found at schema {LATEST}, left at schema {LATEST} (nothing to apply); it was at schema 1 when this "
        f"migrate began: another process migrated it to {LATEST} while this one waited for it"
    )


def test_a_bad_setting_is_one_line(tmp_path):
    db = history_at_version(tmp_path / "history.duckdb", LATEST, tmp_path / "scratch")
    result = attnwatch(db, "migrate", wait_s="soon")
    assert result.returncode == 2 and result.stderr.strip() == (
        "attnwatch migrate: error: ATTNWATCH_LOCK_WAIT_S='soon': expected a number of seconds, 0 or more"
    ), result.stderr
