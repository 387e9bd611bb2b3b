"""Many writers at once into a lake: every run lands exactly once, readers see only whole runs.

Real processes through the CLI, against the session's PostgreSQL server: no serialized ingest
job, no file lock. Every writer is also given the same two bundles first, so the same run is
ingested by several processes at the same moment (history.transactions' claims decide).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from bundle_factory import make_bundle
from conftest import REPO_ROOT
from history.db import open_read, open_write
from history.transactions import CLAIM_SCHEMA

WRITERS = 4
OWN_BUNDLES = 3
SHARED_BUNDLES = 2
CASES = 8  # make_bundle with two variants: 2 x 2 shapes x ... = 8 results per run

READER = textwrap.dedent(
    """
    import sys, pathlib
    from history.db import open_read
    db, stop = sys.argv[1], pathlib.Path(sys.argv[2])
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
    with open_write(lake_db):  # the lake exists before the runners start (README: team set-up)
        pass
    shared = [make_bundle(tmp_path / f"shared-{i}", run_id=f"shared-run{i}", seed=100 + i, commit_sha="ee" * 20,
                          variants=("sdpa", "triton_fa2"), n_samples=10) for i in range(SHARED_BUNDLES)]
    groups = [shared + [make_bundle(tmp_path / f"w{w}-{i}", run_id=f"writer{w}-run{i}", seed=10 * w + i,
                                    commit_sha="ee" * 20, variants=("sdpa", "triton_fa2"), n_samples=10)
                        for i in range(OWN_BUNDLES)] for w in range(WRITERS)]
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, lake_db, str(stop)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, "-m", "ci.cli", "--db", lake_db, "ingest", *map(str, group)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for group in groups]
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

    expected = sorted([f"shared-run{i}" for i in range(SHARED_BUNDLES)] +
                      [f"writer{w}-run{i}" for w in range(WRITERS) for i in range(OWN_BUNDLES)])
    with open_read(lake_db) as con:
        assert sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()) == expected
        assert con.execute("SELECT count(*), count(DISTINCT sha) FROM commits").fetchone() == (1, 1)
        assert con.execute("SELECT count(*) FROM results").fetchone()[0] == CASES * len(expected)
        assert con.execute("SELECT count(*) FROM (SELECT DISTINCT run_id, case_id, sample_index FROM samples)").fetchone() \
            == con.execute("SELECT count(*) FROM samples").fetchone()
        leftover = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = ?",
                               [CLAIM_SCHEMA]).fetchone()[0]
    assert leftover == 0  # every claim was released after its commit

    # A second wave of every bundle, again from all writers at once, adds nothing.
    again = [subprocess.Popen([sys.executable, "-m", "ci.cli", "--db", lake_db, "ingest", *map(str, group)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for group in groups]
    for proc in again:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "0 run(s) inserted" in out
    with open_read(lake_db) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == len(expected)


def test_writers_racing_to_create_the_schema_of_a_new_lake_apply_each_migration_once(lake_db, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with open_write(lake_db):  # DuckLake's own catalog tables: created once, before the race
        pass
    with open_write(lake_db) as con:  # back to an empty schema: drop what the migrations made
        tables = con.execute("SELECT table_name, table_type FROM information_schema.tables "
                             "WHERE table_catalog = current_database() AND table_schema = 'main'").fetchall()
        for name, kind in sorted(tables, key=lambda t: t[1] != "VIEW"):
            con.execute(f'DROP {"VIEW" if kind == "VIEW" else "TABLE"} "{name}"')
    racers = [subprocess.Popen([sys.executable, "-m", "ci.cli", "--db", lake_db, "migrate"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for proc in racers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    with open_read(lake_db) as con:
        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        assert versions == sorted(set(versions)) and versions[0] == 1
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
