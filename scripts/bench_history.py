"""Benchmark the history store: ingest throughput and user-SQL latency. Prints a table.

1. Ingest: N bundles x C cases (default 100 x 1000, S samples per case), made by the test
   bundle factory, ingested with one `ingest_paths` call into a fresh file. Reported:
   validation time, write time, result rows/s and all rows/s (results + samples + others).
   Then the same bundles again (all skipped: the cost of idempotency).
2. SQL: a typical aggregate — median of median_us per variant over the last 30 days on
   main — on a synthetic history of ~1M result rows (scripts/make_synthetic_history),
   through `run_user_sql` in-process and through the `attnwatch sql` command (a new
   process each time, as a user runs it). Median of R repeats.

    python -m scripts.bench_history --workdir /some/scratch [--bundles 100 --cases 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the shared test bundle factory

from bundle_factory import make_bundle  # noqa: E402

from attnwatch.history.ingest.write import ingest_loaded, load_all  # noqa: E402
from attnwatch.history.sql.query import run_user_sql  # noqa: E402
from attnwatch.history.store.location import HistoryLocation  # noqa: E402
from attnwatch.scripts.make_synthetic_history import generate  # noqa: E402
from attnwatch.scripts.script_env import checkout_env  # noqa: E402

TYPICAL_AGGREGATE = """
SELECT r.variant, count(*) AS results, median(r.median_us) AS median_of_median_us
FROM results r JOIN runs u USING (run_id)
WHERE u.branch = 'main' AND r.status = 'ok' AND u.started_at >= now() - INTERVAL 30 DAY
GROUP BY r.variant ORDER BY r.variant
""".strip()


def bench_ingest(workdir: Path, n_bundles: int, n_cases: int, n_samples: int) -> dict:
    bundles_dir = workdir / f"bundles-{n_bundles}x{n_cases}x{n_samples}"
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    started = time.perf_counter()
    paths = []
    for i in range(n_bundles):
        path = bundles_dir / f"b{i:04d}"
        if not (path / "manifest.json").exists():
            make_bundle(
                path,
                run_id=f"bench-{i:04d}",
                n_cases=n_cases,
                seed=i,
                n_samples=n_samples,
                started_at=t0 + timedelta(hours=i),
                with_ncu=True,
            )
        paths.append(path)
    made_s = time.perf_counter() - started
    db = workdir / "ingest-bench.duckdb"
    location = HistoryLocation(path=db)
    for leftover in (db, db.with_name(db.name + ".wal")):
        leftover.unlink(missing_ok=True)

    t = time.perf_counter()
    loaded = load_all(paths)
    validate_s = time.perf_counter() - t
    t = time.perf_counter()
    report = ingest_loaded(location, loaded)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    again = ingest_loaded(location, load_all(paths))
    again_s = time.perf_counter() - t
    assert len(again.skipped) == n_bundles
    results = sum(b.rows["results"] for b in report.inserted)
    all_rows = sum(sum(b.rows.values()) for b in report.inserted)
    total = validate_s + write_s
    return {
        "bundles": n_bundles,
        "cases_per_bundle": n_cases,
        "samples_per_case": n_samples,
        "bundle_bytes": sum(f.stat().st_size for p in paths for f in p.iterdir()),
        "generate_s": made_s,
        "validate_s": validate_s,
        "write_s": write_s,
        "total_s": total,
        "result_rows": results,
        "all_rows": all_rows,
        "result_rows_per_s": results / total,
        "all_rows_per_s": all_rows / total,
        "reingest_all_skipped_s": again_s,
    }


def bench_sql(workdir: Path, rows: int, repeats: int) -> dict:
    db = workdir / f"synthetic-{rows}.duckdb"
    if not db.exists():
        generate(str(db), rows)
    timings_api, timings_cli = [], []
    frame = None
    for _ in range(repeats):
        t = time.perf_counter()
        frame = run_user_sql(HistoryLocation(path=db), TYPICAL_AGGREGATE)
        timings_api.append(time.perf_counter() - t)
    env = checkout_env()
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "attnwatch", "--db", str(db), "sql", TYPICAL_AGGREGATE],
            check=True,
            capture_output=True,
            env=env,
        )
        timings_cli.append(time.perf_counter() - t)
    stored = run_user_sql(HistoryLocation(path=db), "SELECT count(*) AS n FROM results")["n"].iloc[0]
    return {
        "history_result_rows": int(stored),
        "db_bytes": db.stat().st_size,
        "repeats": repeats,
        "aggregate_rows_scanned": int(frame["results"].sum()),
        "api_median_s": statistics.median(timings_api),
        "cli_median_s": statistics.median(timings_cli),
        "cli_python_start_s": _python_start(env),
    }


def _python_start(env) -> float:
    """What a bare `python -m attnwatch --help` costs, to separate start-up from the query."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnwatch", "--help"], check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="scratch directory (bundles, databases)")
    parser.add_argument("--bundles", type=int, default=100)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=100, help="samples per case in each bundle")
    parser.add_argument("--sql-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)

    ingest = bench_ingest(args.workdir, args.bundles, args.cases, args.samples)
    sql = bench_sql(args.workdir, args.sql_rows, args.repeats)
    machine = f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    rows = [
        (
            "ingest: bundles x cases x samples",
            f"{ingest['bundles']} x {ingest['cases_per_bundle']} x {ingest['samples_per_case']}",
        ),
        ("ingest: bundle bytes on disk", f"{ingest['bundle_bytes'] / 2**20:.1f} MiB"),
        ("ingest: validate (parse + check) s", f"{ingest['validate_s']:.2f}"),
        ("ingest: write (transactions) s", f"{ingest['write_s']:.2f}"),
        ("ingest: result rows", f"{ingest['result_rows']}"),
        ("ingest: result rows / s", f"{ingest['result_rows_per_s']:,.0f}"),
        ("ingest: all rows / s (incl. samples)", f"{ingest['all_rows_per_s']:,.0f}"),
        ("re-ingest, all skipped: s", f"{ingest['reingest_all_skipped_s']:.2f}"),
        ("sql: history result rows", f"{sql['history_result_rows']:,}"),
        ("sql: typical aggregate, run_user_sql s (median)", f"{sql['api_median_s']:.3f}"),
        ("sql: same via `attnwatch sql` process s (median)", f"{sql['cli_median_s']:.3f}"),
        ("sql: bare `attnwatch --help` process s", f"{sql['cli_python_start_s']:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"machine: {machine}")
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "ingest": ingest, "sql": sql}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
