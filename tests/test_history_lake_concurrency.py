"""Many writers at once into a lake: every run lands exactly once, readers see only whole runs.

Real processes through the CLI, against the session's PostgreSQL server: no serialized ingest
job, no file lock. Every writer is also given the same two bundles first, so the same run is
ingested by several processes at the same moment (history.store.transactions' claims decide).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from bundle_factory import make_bundle
from conftest import REPO_ROOT, started_postgres
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.store.transactions import CLAIM_SCHEMA
from attnwatch.history.store.location import parse_location

WRITERS = 4
OWN_BUNDLES = 3
SHARED_BUNDLES = 2
CASES = 8  # make_bundle with two variants: 2 x 2 shapes x ... = 8 results per run

READER = textwrap.dedent(
    """
    import sys, pathlib
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location
    db, stop = parse_location(sys.argv[1]), pathlib.Path(sys.argv[2])
    reads, last = 0, 0
    while not stop.exists() or reads == 0:
        with open_read(db) as con:
            runs, distinct, results, per_run = con.execute(
                "SELECT (SELECT count(*) FROM runs), (SELECT count(DISTINCT run_id) FROM runs), "
                "(SELECT count(*) FROM results), (SELECT count(*) FROM (SELECT DISTINCT run_id, case_id FROM results))"
            ).fetchone()
        assert runs == distinct, f"a run was stored twice: {runs} rows, {distinct} run ids"
        assert results == per_run == runs * 8, f"a half-written or doubled run was visible: {runs} runs, {results} results"
        assert runs >= last, f"run count went down: {last} -> {runs}"
        last, reads = runs, reads + 1
    print(reads)
    """
)


def test_concurrent_ingests_store_each_run_once_and_readers_see_whole_runs(lake_db, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with open_write(parse_location(lake_db)):  # the lake exists before the runners start (README: team set-up)
        pass
    shared = [
        make_bundle(
            tmp_path / f"shared-{i}",
            run_id=f"shared-run{i}",
            seed=100 + i,
            commit_sha="ee" * 20,
            variants=("sdpa", "triton_fa2"),
            n_samples=10,
        )
        for i in range(SHARED_BUNDLES)
    ]
    groups = [
        shared
        + [
            make_bundle(
                tmp_path / f"w{w}-{i}",
                run_id=f"writer{w}-run{i}",
                seed=10 * w + i,
                commit_sha="ee" * 20,
                variants=("sdpa", "triton_fa2"),
                n_samples=10,
            )
            for i in range(OWN_BUNDLES)
        ]
        for w in range(WRITERS)
    ]
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, lake_db, str(stop)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", lake_db, "ingest", *map(str, group)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    outputs = [w.communicate(timeout=600) for w in writers]
    stop.touch()
    reader_out, reader_err = reader.communicate(timeout=300)

    inserted_shared = 0
    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, err
        lines = out.splitlines()
        assert sum(line.startswith("inserted writer") for line in lines) == OWN_BUNDLES, out
        inserted_shared += sum(line.startswith("inserted shared") for line in lines)
    assert inserted_shared == SHARED_BUNDLES  # each shared run inserted by exactly one writer
    assert reader.returncode == 0, reader_err
    assert int(reader_out.strip()) >= 1

    expected = sorted(
        [f"shared-run{i}" for i in range(SHARED_BUNDLES)]
        + [f"writer{w}-run{i}" for w in range(WRITERS) for i in range(OWN_BUNDLES)]
    )
    with open_read(parse_location(lake_db)) as con:
        assert sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()) == expected
        assert con.execute("SELECT count(*), count(DISTINCT sha) FROM commits").fetchone() == (1, 1)
        assert con.execute("SELECT count(*) FROM results").fetchone()[0] == CASES * len(expected)
        assert (
            con.execute("SELECT count(*) FROM (SELECT DISTINCT run_id, case_id, sample_index FROM samples)").fetchone()
            == con.execute("SELECT count(*) FROM samples").fetchone()
        )
        leftover = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ?", [CLAIM_SCHEMA]
        ).fetchone()[0]
    assert leftover == 0  # every claim was released after its commit

    # A second wave of every bundle, again from all writers at once, adds nothing.
    again = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", lake_db, "ingest", *map(str, group)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    for proc in again:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "0 run(s) inserted" in out
    with open_read(parse_location(lake_db)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(expected)


def test_writers_racing_to_create_the_schema_of_a_new_lake_apply_each_migration_once(lake_db, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with open_write(parse_location(lake_db)):  # DuckLake's own catalog tables: created once, before the race
        pass
    with open_write(parse_location(lake_db)) as con:  # back to an empty schema: drop what the migrations made
        tables = con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() AND table_schema = 'main'"
        ).fetchall()
        for name, kind in sorted(tables, key=lambda t: t[1] != "VIEW"):
            con.execute(f'DROP {"VIEW" if kind == "VIEW" else "TABLE"} "{name}"')
    racers = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", lake_db, "migrate"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for proc in racers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    with open_read(parse_location(lake_db)) as con:
        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        assert versions == sorted(set(versions)) and versions[0] == 1
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)


RESTART_WRITERS = 8


@pytest.fixture(scope="module")
def own_server():
    """A PostgreSQL server of this module's own: restarting or stopping the session's would cut
    other tests' connections."""
    yield from started_postgres()


def _own_lake(server, tmp_path, name: str) -> tuple[str, dict]:
    location = f"ducklake:postgres:{server.dsn(server.create_database(name))}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "ATTNWATCH_LAKE_DATA": str(tmp_path / "lake-data"),
        "ATTNWATCH_LAKE_RETRY_S": "90",
    }
    subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", location, "migrate"],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return location, env


def _one_line_or_nothing(err: str) -> bool:
    return (
        "Traceback" not in err and len(err.strip().splitlines()) <= 1 and all(len(x) <= 300 for x in err.splitlines())
    )


def test_a_postgres_restart_amid_eight_ingests_stores_every_run_once(own_server, tmp_path):
    """`pg_ctl restart -m fast` while 8 writer processes ingest: the connection errors are waited
    out (history.store.lake_faults), every run is stored exactly once, every process exits 0, and a
    run reported inserted is stored."""
    location, env = _own_lake(own_server, tmp_path, "restart_lake")
    shared = make_bundle(tmp_path / "shared", run_id="shared-run", seed=7, commit_sha="ee" * 20, n_samples=5)
    groups = [
        [
            shared,
            *(
                make_bundle(
                    tmp_path / f"w{w}-{i}",
                    run_id=f"writer{w}-run{i}",
                    seed=10 * w + i,
                    commit_sha="ee" * 20,
                    n_samples=5,
                )
                for i in range(2)
            ),
        ]
        for w in range(RESTART_WRITERS)
    ]
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", location, "ingest", *map(str, group)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    first = _wait_for_first_run(location, env, writers)
    own_server.restart()
    outputs = [w.communicate(timeout=600) for w in writers]
    reported = []
    for w, (out, err) in zip(writers, outputs):
        assert _one_line_or_nothing(err), err
        assert w.returncode == 0, err
        reported += [line.split()[1] for line in out.splitlines() if line.startswith("inserted ")]
    expected = sorted({"shared-run", *(f"writer{w}-run{i}" for w in range(RESTART_WRITERS) for i in range(2))})
    with open_read(parse_location(location)) as con:
        stored = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
        per_run = con.execute("SELECT count(*) FROM results GROUP BY run_id").fetchall()
    assert stored == expected  # each once
    assert set(per_run) == {(24,)}  # whole runs, none doubled
    assert len(reported) == len(set(reported)) and set(reported) <= set(stored)
    assert first is not None  # the restart did come while the writers were at work


def _wait_for_first_run(location: str, env: dict, writers, timeout_s: float = 300.0):
    """Block until some writer has committed a run (the restart then lands amid the ingests)."""
    probe = (
        "from attnwatch.history.store.db import open_read; import sys\n"
        "from attnwatch.history.store.location import parse_location\n"
        "with open_read(parse_location(sys.argv[1])) as c: print(c.execute('SELECT count(*) FROM runs').fetchone()[0])"
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(w.poll() is None for w in writers):
        done = subprocess.run(
            [sys.executable, "-c", probe, location], env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode == 0 and int(done.stdout.strip() or 0) > 0:
            return int(done.stdout.strip())
        time.sleep(0.2)
    return None


def test_an_ingest_waits_out_a_stopped_catalog_then_gives_up_in_one_line(own_server, tmp_path):
    location, env = _own_lake(own_server, tmp_path, "stopped_lake")
    bundle = make_bundle(tmp_path / "b", run_id="patient", n_samples=5)
    own_server.halt()
    try:
        quick = subprocess.run(
            [sys.executable, "-m", "attnwatch", "--db", location, "ingest", str(bundle)],
            env={**env, "ATTNWATCH_LAKE_RETRY_S": "2"},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert quick.returncode == 2 and _one_line_or_nothing(quick.stderr), quick.stderr
        assert "stayed unreachable for more than 2 s" in quick.stderr
        patient = subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", location, "ingest", str(bundle)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(8)  # the attach meets a stopped server, and waits
    finally:
        own_server.start_again()
    out, err = patient.communicate(timeout=300)
    assert patient.returncode == 0 and not err.strip(), err
    assert "1 run(s) inserted" in out


def test_detect_and_the_alert_commands_wait_out_a_stopped_catalog_then_give_up_in_one_line(own_server, tmp_path):
    """The same wait as ingest's for `detect`, `alerts list` and `alerts ack` (history.store.lake_retry)."""
    location, env = _own_lake(own_server, tmp_path, "stopped_alerts_lake")
    bundle = make_bundle(tmp_path / "b", run_id="main-0", n_samples=5, statuses={"cuda_wmma": "failed"})

    def cli(*argv, **extra):
        return [sys.executable, "-m", "attnwatch", "--db", location, *argv], {**env, **extra}

    for argv in (["ingest", str(bundle)], ["detect"]):
        command, run_env = cli(*argv)
        subprocess.run(command, env=run_env, check=True, capture_output=True, timeout=300)
    ack = ["alerts", "ack", "1", "--note", "looking", "--by", "ana"]
    own_server.halt()
    try:
        for argv in (["detect"], ["alerts", "list"], ack):
            command, run_env = cli(*argv, ATTNWATCH_LAKE_RETRY_S="2")
            quick = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=300)
            assert quick.returncode == 2 and _one_line_or_nothing(quick.stderr), (argv, quick.stderr)
            assert "stayed unreachable for more than 2 s" in quick.stderr, (argv, quick.stderr)
        command, run_env = cli(*ack)
        patient = subprocess.Popen(command, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(8)  # the ack meets a stopped server, and waits
    finally:
        own_server.start_again()
    out, err = patient.communicate(timeout=300)
    assert patient.returncode == 0 and not err.strip(), err
    with open_read(parse_location(location)) as con:
        assert con.execute("SELECT action, actor FROM alert_events WHERE action <> 'opened'").fetchall() == [
            ("acknowledged", "ana")
        ]
