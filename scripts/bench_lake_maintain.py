"""Query time on a lake of many separately ingested runs, before and after `history maintain`,
against the same rows written in one go (the compacted reference).

    python -m scripts.bench_lake_maintain [--runs 1000] [--workers 2] [--repeats 5] [--json OUT]

A scratch PostgreSQL server is started (tests/pg_server.py) and the data files go to a temporary
directory. `--runs` bundles (tests/bundle_factory.py: 24 cases, 5 samples each, one commit each
on the main branch) are ingested one call each, as runners do, by `--workers` processes at once;
each ingest adds its own Parquet files and snapshots. Then the dashboard's and detection's queries
(below) are timed, median of `--repeats`, on: (1) that lake; (2) the same lake after
`history maintain --keep-days 0 --grace-hours 0`; (3) a second lake that received the same rows
in one transaction (`history copy`). Target (issue 25): (2) within 1.5x of (3). Prints a Markdown
table for docs/benchmarks/history.md with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the shared test bundle factory and scratch server

from bundle_factory import make_bundle  # noqa: E402

from attnwatch.scripts.bench_dashboard import git_commit, machine  # noqa: E402
from attnwatch.scripts.script_env import checkout_env  # noqa: E402

QUERIES = {
    "detection scan (case_series, last 200 per series)": """
        SELECT count(*), sum(median_us) FROM (
          SELECT *, row_number() OVER (PARTITION BY case_id, series_gpu, series_pool ORDER BY series_index DESC) AS back
          FROM case_series) WHERE back <= 200""",
    "one case's series (Trends / Alerts)": """
        SELECT run_id, median_us, series_index FROM case_series
        WHERE case_id = (SELECT min(case_id) FROM results) ORDER BY series_index""",
    "latest results (Overview)": "SELECT count(*), avg(median_us) FROM latest_results",
    "samples of one run (Run page)": """
        SELECT count(*), avg(latency_us) FROM samples WHERE run_id = (SELECT max(run_id) FROM runs)""",
}

WRITER = textwrap.dedent(
    """
    import sys
    from attnwatch.history.ingest.write import ingest_paths
    from attnwatch.history.store.location import parse_location
    location = parse_location(sys.argv[1])
    for p in sys.argv[2:]:
        ingest_paths(location, [p], deadline_s=600)
    """
)


def _bundles(root: Path, runs: int) -> list[Path]:
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(runs):
        out.append(
            make_bundle(
                root / f"b{i:05d}",
                run_id=f"main-{i:05d}",
                seed=i,
                n_samples=5,
                commit_sha=f"{i + 1:040x}",
                commit_date=start + timedelta(hours=i),
            )
        )
    return out


def _ingest(location: str, bundles: list[Path], workers: int, env: dict) -> float:
    started = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, location, *map(str, bundles[w::workers])], env=env)
        for w in range(workers)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit(f"an ingest worker failed (exit {p.returncode})")
    return time.perf_counter() - started


def _time_queries(location: str, repeats: int) -> dict[str, float]:
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.lake import forget_location
    from attnwatch.history.store.location import parse_location

    parsed = parse_location(location)
    forget_location(parsed)  # a fresh attach, as a new dashboard process makes
    out = {}
    with open_read(parsed) as con:
        for name, sql in QUERIES.items():
            con.execute(sql).fetchall()  # warm: the attach and the catalog's first reads
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                con.execute(sql).fetchall()
                times.append(time.perf_counter() - t)
            out[name] = statistics.median(times)
    return out


def _files(data: Path) -> int:
    return sum(1 for p in data.rglob("*.parquet"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import pg_server
    from attnwatch.history.store.copy import copy_history
    from attnwatch.history.store.location import parse_location
    from attnwatch.history.store.maintain import maintain

    server = pg_server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="attnwatch-bench-maintain-") as tmp:
            root = Path(tmp)
            lake = f"ducklake:postgres:{server.dsn(server.create_database('bench_many'))}"
            reference = f"ducklake:postgres:{server.dsn(server.create_database('bench_once'))}"
            env = checkout_env(ATTNWATCH_LAKE_DATA=str(root / "many"))
            os.environ["ATTNWATCH_LAKE_DATA"] = str(root / "many")
            t = time.perf_counter()
            bundles = _bundles(root / "bundles", args.runs)
            made_s = time.perf_counter() - t
            subprocess.run(
                [sys.executable, "-m", "attnwatch", "--db", lake, "migrate"], env=env, check=True, capture_output=True
            )
            ingest_s = _ingest(lake, bundles, args.workers, env)
            files_before = _files(root / "many")
            before = _time_queries(lake, args.repeats)
            t = time.perf_counter()
            maintain(parse_location(lake), keep_days=0, grace_hours=0)
            maintain_s = time.perf_counter() - t
            files_after = _files(root / "many")
            after = _time_queries(lake, args.repeats)
            os.environ["ATTNWATCH_LAKE_DATA"] = str(root / "once")
            copy_history(parse_location(lake), parse_location(reference))
            once = _time_queries(reference, args.repeats)
            files_once = _files(root / "once")
    finally:
        server.stop()

    result = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": machine(),
        "runs": args.runs,
        "workers": args.workers,
        "bundles_s": made_s,
        "ingest_s": ingest_s,
        "maintain_s": maintain_s,
        "files": [files_before, files_after, files_once],
        "queries": {q: [before[q], after[q], once[q]] for q in QUERIES},
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(
        f"{result['date']}, commit {result['commit']}, {result['machine']}, PostgreSQL on the same box; "
        f"{args.runs} runs ingested one call each by {args.workers} processes in {ingest_s:.0f} s; "
        f"maintain {maintain_s:.1f} s; Parquet files {files_before} -> {files_after} (one-go lake: {files_once})\n"
    )
    print("| query | lake as ingested (s) | after `history maintain` (s) | same rows in one go (s) | after / one go |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for q, (b, a, o) in result["queries"].items():
        print(f"| {q} | {b:.3f} | {a:.3f} | {o:.3f} | {a / o:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
