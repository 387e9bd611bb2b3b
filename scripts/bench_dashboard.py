"""Render time of every dashboard page, cold and warm, over a given history: server-side, and
with --browser as a user sees it in Chromium.

    python scripts/bench_dashboard.py --db LOCATION [--warm-repeats 5] [--json OUT] [--browser]

LOCATION is a history file or a lake (`ducklake:postgres:...`, history.store.location), so the same
pages can be timed on a file and on a lake holding the same rows (`attnwatch history copy`).

Each page is rendered by Streamlit's AppTest (the same script run a server does, without the
browser). Definitions:
  cold  the page's first render after `st.cache_data.clear()`: every query goes to DuckDB on a
        fresh connection; Python modules are already imported (as in a running server);
  warm  the same page rendered again, `--warm-repeats` times: results come from the cache as
        long as the file is unchanged. The median and the maximum are reported.
The SQL page is also timed running one example query (not cached: user SQL always runs).
With --compare-samples N, a copy of the history gets N synthetic samples per case for the two
newest main runs of its most-run GPU (the generator writes none), and Compare is timed on that
pair: its cold render then includes the bootstrap intervals of every case.
With --browser (--pages to time some pages only, --servers N to repeat N times), `attnwatch
dashboard` serves the history and headless Chromium (Debian's, driven by Playwright through
executable_path) loads each page by its URL (scripts/dashboard_browser.py), timed by the page's
own clock (DRAWN_JS, polled on every animation frame) from navigation start
(`performance.timeOrigin`) until the page is drawn:
  drawn  the page's own marker (BROWSER_PAGES: an element it shows only when finished, where
        possible its last one) is present and visible, every Vega-Lite chart on the page (Trends)
        has its SVG drawn and visible, every chart image the server drew (Alerts, Kernel: an SVG data
        URL) is decoded and visible, Streamlit shows no running indicator (stStatusWidget) and no
        skeleton (stSkeleton: an element whose code is still loading), and all of that has held
        for SETTLE_MS; the time reported is the start of that settled state;
  cold  the first load of that page in a fresh server process (`attnwatch dashboard` started
        for it alone, so nothing of the page is cached and the process has served nothing yet;
        what the server does before it listens, such as app.serve's imports and app.warm's
        warm-up of the first page, is in `server start`, not here) and a fresh browser profile
        (nothing in its HTTP or code cache: a first visit). Every page and every one of the N
        repeats gets its own server and profile; the median and the range of the N are reported;
  next  the same URL's second and third loads (a new session each time, data from the server's
        cache), reported as their maximum: the browser has the page's scripts in its HTTP cache
        but is still compiling them. V8 compiles a script on its first run, writes its code
        cache on the second and only reads it from the third on (V8 blog, "Code caching for
        JavaScript developers", 2019: cold, warm and hot runs); a chart library's compile is
        what separates a first from a returning visit of a chart page (~0.6 s for plotly's on
        a 2-core EPYC);
  warm  then `--warm-repeats` more loads of that URL: what a returning user waits for (browser
        and server caches hot); the median and the maximum are reported. Before each warm
        load the idle page runs a fixed piece of JavaScript (CPU_REFERENCE_JS); its time, the
        "CPU reference", shows how fast the machine ran the browser at that moment.
  server start  from launching `attnwatch dashboard` until it answers its health check.
The browser runs on a persistent profile in a temporary directory, as a returning user's does: it
keeps the HTTP cache and V8's code cache between loads. An off-the-record context (Playwright's
default) keeps no code cache on disk: in its traces even the sixth load of Trends compiled the
chart library's chunk again (plotly's, then) and produced a 4.2 MB module cache that no later load read
(`v8.produceModuleCache`, 42-73 ms of main-thread time per load), which no returning user pays.
Prints a Markdown table with the machine, date, commit and history size, for docs/benchmarks/dashboard.md.
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
from datetime import datetime, timezone
from pathlib import Path

from attnwatch.history.links import PAGES as DECLARED_PAGES
from attnwatch.scripts.dashboard_browser import bench_browser_servers

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "app" / "streamlit_app.py"
PAGES = tuple(page.script for page in DECLARED_PAGES)  # every page's view, in the navigation's order


def history_size(db: str) -> dict:
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location

    with open_read(parse_location(db)) as con:
        row = con.execute(
            "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM runs WHERE synthetic), "
            "(SELECT count(*) FROM results), (SELECT count(*) FROM samples), (SELECT count(*) FROM ncu_cases)"
        ).fetchone()
    return dict(zip(("runs", "synthetic_runs", "results", "samples", "ncu_cases"), row))


def stored_bytes(db: str) -> int:
    """The file's size, or the lake's data files (ducklake_table_info) without its catalog."""
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location

    location = parse_location(db)
    if not location.is_lake:
        return location.path.stat().st_size
    with open_read(location) as con:
        return int(
            con.execute(
                "SELECT sum(file_size_bytes + delete_file_size_bytes) FROM ducklake_table_info('history')"
            ).fetchone()[0]
            or 0
        )


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def bench_page(page: str, warm_repeats: int) -> dict:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=300).run()
    st.cache_data.clear()
    if page == PAGES[0]:
        cold = timed(at.run)
    else:
        cold = timed(lambda: at.switch_page(page).run())
    problems = [e.value for e in at.exception] + [e.value for e in at.warning if "could not read" in e.value]
    warm = [timed(at.run) for _ in range(warm_repeats)]
    result = {
        "page": page,
        "cold_s": cold,
        "warm_median_s": statistics.median(warm),
        "warm_max_s": max(warm),
        "problems": problems,
    }
    if problems:  # the page did not draw (e.g. an unreadable history): no interactions to time
        return result
    if page == "views/trends.py":  # the heaviest view: every variant over the newest 1000 runs
        at.multiselect(key="trends_variants").set_value(at.multiselect(key="trends_variants").options)
        at.slider(key="trends_max_runs").set_value(1000)
        st.cache_data.clear()
        result["all_variants_1000_runs_cold_s"] = timed(at.run)
        result["all_variants_1000_runs_warm_s"] = timed(at.run)
        result["problems"] += [e.value for e in at.exception]
    if page == "views/sql.py":
        at.selectbox(key="sql_example").select_index(0).run()
        result["query_s"] = timed(lambda: at.button(key="sql_run").click().run())
        result["problems"] += [e.value for e in at.error if e.value.startswith("Query refused")]
    return result


def add_samples(db: Path, copy: Path, per_case: int) -> tuple[str, str, int]:
    """Copy `db` and give the two newest main runs of its most-run GPU `per_case` log-normal
    samples (0.5% spread) around each stored median; returns (base run, head run, cases)."""
    import shutil

    from attnwatch.history.store.db import open_write
    from attnwatch.history.store.location import HistoryLocation

    shutil.copyfile(db, copy)
    with open_write(HistoryLocation(path=copy)) as con:
        base, head = [
            r[0]
            for r in con.execute(
                """
            SELECT run_id FROM runs WHERE branch = 'main' AND status = 'complete' AND gpu_name = (
                SELECT gpu_name FROM runs GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1)
            ORDER BY started_at DESC LIMIT 2
            """
            ).fetchall()
        ][::-1]
        con.execute(
            """
            INSERT INTO samples (run_id, case_id, sample_index, latency_us)
            SELECT r.run_id, r.case_id, i.range::INTEGER, r.median_us * exp(0.005 * sqrt(-2 * ln(random())) * cos(2 * pi() * random()))
            FROM results r, range(?) i
            WHERE r.run_id IN (?, ?) AND r.median_us IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.run_id = r.run_id)
            """,
            [per_case, base, head],
        )
        cases = con.execute("SELECT count(DISTINCT case_id) FROM samples WHERE run_id = ?", [head]).fetchone()[0]
    return base, head, cases


def bench_compare_with_samples(base: str, head: str, warm_repeats: int) -> dict:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=300)
    at.query_params["base"] = base
    at.query_params["head"] = head
    at.run()
    st.cache_data.clear()
    cold = timed(lambda: at.switch_page("views/compare.py").run())
    warm = [timed(at.run) for _ in range(warm_repeats)]
    problems = [e.value for e in at.exception]
    return {
        "page": "compare (with samples)",
        "cold_s": cold,
        "warm_median_s": statistics.median(warm),
        "warm_max_s": max(warm),
        "problems": problems,
    }


def import_seconds() -> float:
    """A fresh interpreter importing Streamlit and every app module: paid once per server
    process, before any page (not part of the per-page cold figures)."""
    code = (
        "import time; t = time.perf_counter(); import streamlit; "
        "import attnwatch.app.ui, attnwatch.app.trend_chart, attnwatch.app.data.compare, attnwatch.app.data.trends, "
        "attnwatch.app.data.kernel, attnwatch.app.data.sql_console, "
        "attnwatch.app.data.alerts, attnwatch.app.data.overview; print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        required=True,
        help="the history to render, a file or a ducklake:postgres: lake (e.g. from scripts/make_synthetic_history.py)",
    )
    parser.add_argument("--warm-repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--compare-samples",
        type=int,
        default=0,
        metavar="N",
        help="also time Compare on a copy with N samples per case for two runs",
    )
    parser.add_argument(
        "--browser",
        action="store_true",
        help="time page loads in headless Chromium against a served dashboard instead of AppTest",
    )
    parser.add_argument(
        "--pages", help="with --browser: only these pages, comma-separated (push, overview, trends, ...)"
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        metavar="N",
        help="with --browser: repeat in N fresh server processes; cold is then the median of N cold loads",
    )
    args = parser.parse_args(argv)
    from attnwatch.history.store.db import exists
    from attnwatch.history.store.location import parse_location

    location = parse_location(args.db)
    db = location.label if location.is_lake else str(location.path.resolve())
    if not exists(location):
        print(f"bench_dashboard: {db}: no such history", file=sys.stderr)
        return 2
    if location.is_lake and args.compare_samples:
        print("bench_dashboard: --compare-samples copies a history file; give a file", file=sys.stderr)
        return 2
    os.environ["ATTNWATCH_DB"] = db
    import duckdb
    import streamlit

    size = history_size(db)
    imports = import_seconds()
    if args.browser:
        pages = args.pages.split(",") if args.pages else None
        results = bench_browser_servers(db, args.warm_repeats, max(1, args.servers), pages)
    else:
        results = [bench_page(page, args.warm_repeats) for page in PAGES]
    if args.compare_samples and not args.browser:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "with_samples.duckdb"
            base, head, cases = add_samples(db, copy, args.compare_samples)
            os.environ["ATTNWATCH_DB"] = str(copy)
            result = bench_compare_with_samples(base, head, args.warm_repeats)
            result["notes"] = f"{cases} cases x {args.compare_samples} samples per run, intervals for every case"
            results.append(result)
            os.environ["ATTNWATCH_DB"] = db
    report = {
        "load_average": os.getloadavg(),  # other work on the machine slows a browser most of all
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine": machine(),
        "versions": {"streamlit": streamlit.__version__, "duckdb": duckdb.__version__},
        "history": size,
        "history_kind": "lake" if location.is_lake else "file",
        "db_bytes": stored_bytes(db),
        "import_s": imports,
        "mode": "browser" if args.browser else "apptest",
        "pages": results,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    label = " (synthetic)" if size["synthetic_runs"] else ""
    print(f"{report['date']}, commit {report['commit']}, {report['machine']}")
    print(
        f"streamlit {streamlit.__version__}, duckdb {duckdb.__version__}; {report['history_kind']} history{label}: {size['runs']:,} runs, "
        f"{size['results']:,} results, {size['ncu_cases']:,} ncu cases, {report['db_bytes'] / 2**20:.0f} MiB"
    )
    print(
        f"server process start (imports, once): {imports:.2f} s; load average at the end "
        + "/".join(f"{x:.1f}" for x in report["load_average"])
        + f" on {os.cpu_count()} cores"
    )
    print(
        "measured: "
        + (
            f"page loads in headless Chromium (navigation start to drawn); cold: the page's first load "
            f"in a fresh server and a fresh browser profile, median (range) of {max(1, args.servers)}"
            if args.browser
            else "server-side renders (AppTest)"
        )
    )
    print()
    browser = args.browser
    print(
        "| page | cold (s) | "
        + ("server start (s) | 2nd-3rd load, max (s) | " if browser else "")
        + "warm median (s) | warm max (s) | "
        + ("CPU reference, median (max) (ms) | " if browser else "")
        + "notes |"
    )
    print(
        "| --- | ---: | "
        + ("---: | ---: | " if browser else "")
        + "---: | ---: | "
        + ("---: | " if browser else "")
        + "--- |"
    )
    for r in results:
        notes = "; ".join(r["problems"] + ([r["notes"]] if "notes" in r else []))
        if "all_variants_1000_runs_cold_s" in r:
            notes = (notes + "; " if notes else "") + (
                f"all variants, newest 1000 runs: cold {r['all_variants_1000_runs_cold_s']:.2f} s, "
                f"warm {r['all_variants_1000_runs_warm_s']:.2f} s"
            )
        if len(r.get("cold_all_s", [])) > 1:
            notes = (notes + "; " if notes else "") + "cold loads: " + ", ".join(f"{c:.2f}" for c in r["cold_all_s"])
        colds = r.get("cold_all_s", [r["cold_s"]])
        cold = f"{r['cold_s']:.2f}" + (f" ({min(colds):.2f}-{max(colds):.2f})" if len(colds) > 1 else "")
        if "query_s" in r:
            notes = (notes + "; " if notes else "") + f"example query run: {r['query_s']:.2f} s"
        name = Path(r["page"]).stem if r["page"].startswith("views/") else r["page"]
        following = f"{r['server_start_s']:.2f} | {r['next_s']:.2f} | " if browser else ""
        reference = (
            f"{statistics.median(r['cpu_reference_ms']):.0f} ({max(r['cpu_reference_ms']):.0f}) | " if browser else ""
        )
        print(f"| {name} | {cold} | {following}{r['warm_median_s']:.2f} | {r['warm_max_s']:.2f} | {reference}{notes} |")
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
