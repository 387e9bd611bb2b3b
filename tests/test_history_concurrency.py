"""Several ingest processes and a reader at once: every run lands exactly once, nobody fails.

DuckDB allows one writer process per file and a read-only connection blocks writers, so
both sides retry on the file lock (history.store.db). This drives real processes through the CLI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from bundle_factory import make_bundle
from conftest import REPO_ROOT
from attnwatch.history.store.db import open_read
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

READER = textwrap.dedent(
    """
    import sys, pathlib
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location
    db, stop = parse_location(sys.argv[1]), pathlib.Path(sys.argv[2])
    reads, last = 0, 0
    while not stop.exists() or reads == 0:
        with open_read(db, deadline_s=60) as con:
            runs = con.execute("SELECT count(*) FROM runs").fetchone()[0]
            results = con.execute("SELECT count(*) FROM results").fetchone()[0]
        assert runs >= last, f"run count went down: {last} -> {runs}"
        assert results == runs * 8, f"a half-written run was visible: {runs} runs, {results} results"
        last, reads = runs, reads + 1
    print(reads)
    """
)


def test_parallel_ingest_with_a_reader(tmp_path, db_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    seed_bundle = make_bundle(tmp_path / "seed", run_id="seed-run", variants=("sdpa", "triton_fa2"), n_samples=20)
    ingest_paths(parse_location(db_path), [seed_bundle])
    groups = []
    for w in range(4):
        groups.append(
            [
                make_bundle(
                    tmp_path / f"w{w}-{i}",
                    run_id=f"writer{w}-run{i}",
                    seed=10 * w + i,
                    variants=("sdpa", "triton_fa2"),
                    n_samples=20,
                )
                for i in range(3)
            ]
        )
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db_path), str(stop)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "attnwatch",
                "--db",
                str(db_path),
                "ingest",
                "--lock-timeout",
                "120",
                *map(str, group),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    outputs = [w.communicate(timeout=300) for w in writers]
    stop.touch()
    reader_out, reader_err = reader.communicate(timeout=300)

    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, err
        assert "3 run(s) inserted" in out
    assert reader.returncode == 0, reader_err
    assert int(reader_out.strip()) >= 1

    with open_read(parse_location(db_path)) as con:
        runs = sorted(r[0] for r in con.execute("SELECT run_id FROM runs").fetchall())
        per_run = set(r[0] for r in con.execute("SELECT count(*) FROM results GROUP BY run_id").fetchall())
    expected = sorted(["seed-run"] + [f"writer{w}-run{i}" for w in range(4) for i in range(3)])
    assert runs == expected
    assert per_run == {8}

    # And a second wave of the same bundles adds nothing.
    again = ingest_paths(parse_location(db_path), [p for g in groups for p in g])
    assert all(b.action == "skipped" for b in again.bundles)


def test_lock_held_past_the_deadline_names_the_file(tmp_path, db_path):
    import pytest

    from attnwatch.history.errors import LockTimeoutError
    from attnwatch.history.store.db import open_write

    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", variants=("sdpa",), n_samples=5)])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(120)",
            str(db_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeoutError, match=str(db_path)):
            with open_write(parse_location(db_path), deadline_s=0.3):
                pass
        with pytest.raises(LockTimeoutError, match="lock"):
            with open_read(parse_location(db_path), deadline_s=0.3):
                pass
    finally:
        holder.kill()
        holder.wait()
    with open_write(parse_location(db_path), deadline_s=30) as con:  # released: the next writer gets in
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
