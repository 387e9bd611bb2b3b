"""Many runners ingesting into one DuckLake history at once: rows expected vs stored, duplicates,
failures, throughput.

    python -m scripts.bench_lake_ingest [--writers 8] [--bundles 20] [--shared 2] [--db LAKE] [--json OUT]

Each writer is its own process that ingests its bundles one call each, as a runner ingests its
own run (history.ingest.write.ingest_paths; each call opens the lake, as `attnwatch ingest` does, but
without the interpreter start-up). All writers start together. Every writer is also given the
same --shared bundles first, so the same run is ingested by every writer at the same moment:
it must be stored once. A reader process polls meanwhile and records any moment at which it saw
a half-written or doubled run. Without --db a scratch PostgreSQL server is started
(tests/pg_server.py) and the data files go to a temporary directory.

Bundles come from tests/bundle_factory.py: 6 variants x 6 shapes x fp16 x causal/not = 72 cases,
50 samples each, with correctness and build records. Prints a Markdown table for
docs/benchmarks/history.md with the machine, date and commit.
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

from bundle_factory import SHAPES, make_bundle  # noqa: E402

from attnwatch.scripts.bench_dashboard import git_commit, machine  # noqa: E402
from attnwatch.scripts.script_env import checkout_env  # noqa: E402

WRITER = textwrap.dedent(
    """
    import json, sys, time
    from attnwatch.history.ingest.write import ingest_paths
    from attnwatch.history.store.location import parse_location
    db, go, paths = parse_location(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    time.sleep(max(0.0, go - time.time()))  # every writer starts at the same moment
    calls = []
    for p in paths:
        started = time.perf_counter()
        try:
            report = ingest_paths(db, [p], deadline_s=600)
            b = report.bundles[0]
            calls.append({"path": p, "action": b.action, "reason": b.reason, "s": time.perf_counter() - started})
        except Exception as exc:
            calls.append({"path": p, "action": "failed", "reason": f"{type(exc).__name__}: {exc}"[:300],
                          "s": time.perf_counter() - started})
    print(json.dumps(calls))
    """
)

READER = textwrap.dedent(
    """
    import json, sys, pathlib, time
    from attnwatch.history.store.db import open_read
    from attnwatch.history.errors import HistoryNotFoundError
    from attnwatch.history.store.location import parse_location
    db, stop, cases = parse_location(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3])
    reads, bad = 0, []
    while not stop.exists():
        with open_read(db) as con:
            runs, distinct, results = con.execute(
                "SELECT (SELECT count(*) FROM runs), (SELECT count(DISTINCT run_id) FROM runs), "
                "(SELECT count(*) FROM results)").fetchone()
        reads += 1
        if runs != distinct or results != runs * cases:
            bad.append([runs, distinct, results])
        time.sleep(0.2)
    print(json.dumps({"reads": reads, "inconsistent": bad}))
    """
)


def make_bundles(work: Path, writers: int, per_writer: int, shared: int) -> tuple[list[Path], list[list[Path]]]:
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    options = dict(shapes=SHAPES, dtypes=("fp16",), n_samples=50)
    common = [
        make_bundle(
            work / f"shared-{i}",
            run_id=f"shared-{i}",
            seed=1000 + i,
            commit_sha=f"{i:040x}",
            started_at=start + timedelta(minutes=i),
            **options,
        )
        for i in range(shared)
    ]
    groups = []
    for w in range(writers):
        groups.append(
            [
                make_bundle(
                    work / f"w{w}-{i}",
                    run_id=f"writer{w}-run{i}",
                    seed=w * 1000 + i,
                    commit_sha=f"{shared + i:040x}",
                    started_at=start + timedelta(hours=i, minutes=w),
                    **options,
                )
                for i in range(per_writer)
            ]
        )
    return common, groups


def stored(db: str) -> dict:
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location

    with open_read(parse_location(db)) as con:
        row = con.execute(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(DISTINCT run_id) FROM runs), "
            "(SELECT count(*) FROM results), (SELECT count(*) FROM (SELECT DISTINCT run_id, case_id FROM results)), "
            "(SELECT count(*) FROM samples), (SELECT count(*) FROM commits), (SELECT count(DISTINCT sha) FROM commits)"
        ).fetchone()
    keys = ("runs", "distinct_runs", "results", "distinct_results", "samples", "commits", "distinct_commits")
    return dict(zip(keys, row))


def run(db: str, common: list[Path], groups: list[list[Path]], cases: int, samples_per_run: int) -> dict:
    env = checkout_env()
    from attnwatch.history.store.db import open_write
    from attnwatch.history.store.location import parse_location

    with open_write(
        parse_location(db)
    ):  # the lake exists before the runners start (docs/reference/history.md: a team history)
        pass
    with tempfile.TemporaryDirectory() as scratch:
        stop = Path(scratch) / "stop"
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, db, str(stop), str(cases)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        go = time.time() + 5.0
        started = time.perf_counter()
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, db, str(go), *map(str, common + group)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for group in groups
        ]
        outputs = [w.communicate() for w in writers]
        wall = time.perf_counter() - started
        stop.touch()
        reader_out, reader_err = reader.communicate()
    calls, errors = [], []
    for proc, (out, err) in zip(writers, outputs):
        if proc.returncode != 0:
            errors.append(err.strip()[-500:])
            continue
        calls += json.loads(out.strip().splitlines()[-1])
    unique_runs = len(common) + sum(len(g) for g in groups)
    result = {
        "writers": len(groups),
        "bundles_per_writer": len(groups[0]),
        "shared_per_writer": len(common),
        "calls": len(calls),
        "inserted": sum(c["action"] == "inserted" for c in calls),
        "skipped": sum(c["action"] == "skipped" for c in calls),
        "failed": sum(c["action"] == "failed" for c in calls) + len(errors),
        "failures": [c["reason"] for c in calls if c["action"] == "failed"] + errors,
        "expected": {"runs": unique_runs, "results": unique_runs * cases, "samples": unique_runs * samples_per_run},
        "stored": stored(db),
        "wall_s": wall - 5.0,  # less the common start delay
        "call_s_median": statistics.median(c["s"] for c in calls) if calls else None,
        "call_s_p90": statistics.quantiles([c["s"] for c in calls], n=10)[-1] if len(calls) > 1 else None,
        "reader": json.loads(reader_out.strip().splitlines()[-1])
        if reader.returncode == 0
        else {"error": reader_err[-500:]},
    }
    s = result["stored"]
    result["duplicate_runs"] = s["runs"] - s["distinct_runs"]
    result["duplicate_results"] = s["results"] - s["distinct_results"]
    result["runs_per_s"] = result["inserted"] / result["wall_s"]
    result["results_per_s"] = result["inserted"] * cases / result["wall_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--bundles", type=int, default=20, help="bundles of its own per writer")
    parser.add_argument("--shared", type=int, default=2, help="bundles every writer ingests too")
    parser.add_argument("--db", help="a ducklake:postgres: location (default: a scratch server)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="attnwatch-bench-") as work_dir:
        work = Path(work_dir)
        server = None
        if args.db is None:
            import pg_server

            server = pg_server.start()
            args.db = f"ducklake:postgres:{server.dsn(server.create_database('bench'))}"
            os.environ["ATTNWATCH_LAKE_DATA"] = str(work / "lake-data")
        try:
            t0 = time.perf_counter()
            common, groups = make_bundles(work / "bundles", args.writers, args.bundles, args.shared)
            print(f"bundles written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            cases, samples = 72, 72 * 50
            result = run(args.db, common, groups, cases, samples)
        finally:
            if server is not None:
                server.stop()
    import duckdb

    result.update(
        {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git_commit(),
            "machine": machine(),
            "duckdb": duckdb.__version__,
        }
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    e, s = result["expected"], result["stored"]
    print(f"{result['date']}, commit {result['commit']}, {result['machine']}, duckdb {result['duckdb']}")
    print(
        f"{result['writers']} writers x ({result['bundles_per_writer']} own + {result['shared_per_writer']} shared) "
        f"bundles, each 72 cases x 50 samples"
    )
    print()
    print("| figure | value |")
    print("| --- | ---: |")
    for label, value in (
        (
            "ingest calls (inserted / skipped / failed)",
            f"{result['calls']} ({result['inserted']} / {result['skipped']} / {result['failed']})",
        ),
        ("runs expected / stored", f"{e['runs']} / {s['runs']}"),
        ("result rows expected / stored", f"{e['results']:,} / {s['results']:,}"),
        ("sample rows expected / stored", f"{e['samples']:,} / {s['samples']:,}"),
        ("duplicate runs / duplicate result rows", f"{result['duplicate_runs']} / {result['duplicate_results']}"),
        ("commits stored (distinct)", f"{s['commits']} ({s['distinct_commits']})"),
        ("wall time, s", f"{result['wall_s']:.1f}"),
        ("throughput, runs/s (result rows/s)", f"{result['runs_per_s']:.2f} ({result['results_per_s']:.0f})"),
        ("one ingest call, median / p90, s", f"{result['call_s_median']:.2f} / {result['call_s_p90']:.2f}"),
        (
            "reader polls / inconsistent views",
            f"{result['reader'].get('reads')} / {len(result['reader'].get('inconsistent', []))}",
        ),
    ):
        print(f"| {label} | {value} |")
    for failure in result["failures"][:5]:
        print(f"failure: {failure}")
    ok = (
        result["failed"] == 0
        and s["runs"] == e["runs"]
        and s["results"] == e["results"]
        and result["duplicate_runs"] == 0
        and not result["reader"].get("inconsistent")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
