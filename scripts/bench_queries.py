"""Typical questions asked of a history, timed on a file or a lake (or both, side by side).

    python -m scripts.bench_queries --db LOCATION [--db LOCATION2] [--repeats 3] [--json OUT]

Each query runs through `history.sql.query.run_user_sql`, the locked-down path of `attnwatch sql` and
the dashboard's SQL page (on a lake: the gate, the sandboxed instance, the catalog), and the
median of --repeats runs after one warm-up is reported. The queries are the ones
docs/benchmarks/history.md reports for the 1M-row file history, plus a time-window scan of results.
Prints a Markdown table with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from attnwatch.history.store.location import HistoryLocation, parse_location
from attnwatch.history.sql.query import run_user_sql
from attnwatch.scripts.bench_dashboard import git_commit, history_size, machine, stored_bytes
from attnwatch.scripts.bench_history import TYPICAL_AGGREGATE

QUERIES = {
    "typical aggregate: median per variant, main, last 30 days": TYPICAL_AGGREGATE,
    "one case's case_series on one GPU": (
        "SELECT series_index, median_us, commit_sha FROM case_series "
        "WHERE case_id = 'triton_fa2/b4_h16_s2k/fp16/noncausal' AND series_gpu = 'NVIDIA H200' ORDER BY series_index"
    ),
    "latest_results grouped by GPU": "SELECT gpu_name, count(*), median(gap_to_baseline) FROM latest_results GROUP BY ALL",
    "run_summaries over all runs": "SELECT count(*), sum(cases_ok), sum(cases_crashed) FROM run_summaries",
    "results per GPU and week (full scan)": (
        "SELECT u.gpu_name, date_trunc('week', u.started_at) AS week, count(*) AS results, avg(r.tflops) AS tflops "
        "FROM results r JOIN runs u USING (run_id) GROUP BY ALL ORDER BY ALL"
    ),
}


def time_query(db: HistoryLocation, sql: str, repeats: int) -> dict:
    frame = run_user_sql(db, sql)  # warm-up: the lake's sandboxed instance is attached once per process
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run_user_sql(db, sql)
        times.append(time.perf_counter() - started)
    return {"median_s": statistics.median(times), "max_s": max(times), "rows": len(frame)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db", action="append", required=True, help="a history file or ducklake:postgres: lake (repeatable)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    histories = []
    for db in args.db:
        location = parse_location(db)
        label = location.label if location.is_lake else str(location.path.resolve())
        first_open = time.perf_counter()
        size = history_size(label)
        histories.append(
            {
                "db": label,
                "kind": "lake" if location.is_lake else "file",
                "size": size,
                "stored_bytes": stored_bytes(label),
                "first_open_s": time.perf_counter() - first_open,
                "queries": {name: time_query(location, sql, args.repeats) for name, sql in QUERIES.items()},
            }
        )
    import duckdb

    report = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine": machine(),
        "duckdb": duckdb.__version__,
        "histories": histories,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"{report['date']}, commit {report['commit']}, {report['machine']}, duckdb {report['duckdb']}")
    for h in histories:
        s = h["size"]
        print(
            f"{h['kind']}: {s['runs']:,} runs, {s['results']:,} results, {h['stored_bytes'] / 2**20:.0f} MiB "
            f"of data; first open and count {h['first_open_s']:.2f} s"
        )
    print()
    print("| query (median of %d, s) | %s |" % (args.repeats, " | ".join(h["kind"] for h in histories)))
    print("| --- |" + " ---: |" * len(histories))
    for name in QUERIES:
        print(f"| {name} | " + " | ".join(f"{h['queries'][name]['median_s']:.3f}" for h in histories) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
