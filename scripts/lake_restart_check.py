"""A PostgreSQL restart amid concurrent ingests, many times: every run stored once, every writer
exits 0 or with one short line, no traceback.

    python -m scripts.lake_restart_check [--trials 10] [--writers 8] [--bundles 2] [--restarts 1]

One scratch PostgreSQL server (tests/pg_server.py); per trial a new lake, `--writers` processes
each ingesting one shared bundle and `--bundles` of its own through `attnwatch ingest`, and
`--restarts` times `pg_ctl restart -m fast` at a random moment after they start (0.5 to 8 s).
A trial holds when every process exits 0, or 2 with one line of at most 300 characters and no
traceback; every run is stored exactly once, whole; and every run some writer reported
inserted is stored. The CI test (tests/test_history_lake_concurrency.py) runs one such trial.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

from bundle_factory import make_bundle  # noqa: E402

from attnwatch.scripts.script_env import checkout_env  # noqa: E402


def _trial(server, n: int, root: Path, writers: int, own: int, restarts: int, rng: random.Random) -> dict:
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location

    location = f"ducklake:postgres:{server.dsn(server.create_database(f'trial_{n}'))}"
    env = checkout_env(ATTNWATCH_LAKE_DATA=str(root / f"data-{n}"), ATTNWATCH_LAKE_RETRY_S="90")
    subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", location, "migrate"], env=env, check=True, capture_output=True
    )
    shared = make_bundle(root / f"t{n}-shared", run_id=f"t{n}-shared", seed=n, commit_sha="ee" * 20, n_samples=5)
    groups = [
        [
            shared,
            *(
                make_bundle(
                    root / f"t{n}-w{w}-{i}",
                    run_id=f"t{n}-w{w}-{i}",
                    seed=1000 * n + 10 * w + i,
                    commit_sha="ee" * 20,
                    n_samples=5,
                )
                for i in range(own)
            ),
        ]
        for w in range(writers)
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", location, "ingest", *map(str, g)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for g in groups
    ]
    for _ in range(restarts):
        time.sleep(rng.uniform(0.5, 8.0))
        server.restart()
    outs = [p.communicate(timeout=900) for p in procs]
    expected = {f"t{n}-shared", *(f"t{n}-w{w}-{i}" for w in range(writers) for i in range(own))}
    with open_read(parse_location(location)) as con:
        stored = [r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()]
        results = dict(con.execute("SELECT run_id, count(*) FROM results GROUP BY run_id").fetchall())
    reported = {line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("inserted ")}
    failed = [p.returncode for p in procs if p.returncode != 0]
    unclear = [
        err
        for p, (_, err) in zip(procs, outs)
        if "Traceback" in err or len(err.strip().splitlines()) > 1 or any(len(x) > 300 for x in err.splitlines())
    ]
    return {
        "exit_nonzero": len(failed),
        "unclear": len(unclear),
        "doubled": len(stored) - len(set(stored)),
        "lost_reported": len(reported - set(stored)),
        "missing": len(expected - set(stored)),
        "half": sum(1 for c in results.values() if c != 24),
        "example": (unclear or [""])[0][-400:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--bundles", type=int, default=2)
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import pg_server

    rng = random.Random(args.seed)
    server = pg_server.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="attnwatch-restart-") as tmp:
            for n in range(args.trials):
                r = _trial(server, n, Path(tmp), args.writers, args.bundles, args.restarts, rng)
                rows.append(r)
                held = not (
                    r["unclear"]
                    or r["doubled"]
                    or r["lost_reported"]
                    or r["half"]
                    or (r["missing"] and not r["exit_nonzero"])
                )
                print(f"trial {n}: {'held' if held else 'FAILED'} {r}", flush=True)
    finally:
        server.stop()
    held = sum(
        1
        for r in rows
        if not (
            r["unclear"] or r["doubled"] or r["lost_reported"] or r["half"] or (r["missing"] and not r["exit_nonzero"])
        )
    )
    print("\n| trials | held | failed | writers exiting non-zero | unclear errors | runs doubled | reported but lost |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {len(rows)} | {held} | {len(rows) - held} | {sum(r['exit_nonzero'] for r in rows)} of "
        f"{len(rows) * args.writers} | {sum(r['unclear'] for r in rows)} | {sum(r['doubled'] for r in rows)} | "
        f"{sum(r['lost_reported'] for r in rows)} |"
    )
    return 0 if held == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
