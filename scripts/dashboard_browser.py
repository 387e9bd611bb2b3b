"""The browser half of scripts/bench_dashboard.py (`--browser`): a served dashboard's pages loaded
in headless Chromium and timed by the page's own clock until drawn. bench_dashboard's docstring
defines what is measured (drawn, cold, next, warm, server start, the CPU reference); here are the
page markers, the JavaScript each load and each CPU reference runs in the page, and the loads
themselves, each page in a fresh `attnwatch dashboard` process and a fresh browser profile."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from attnwatch.history.links import PAGES as DECLARED_PAGES

REPO = Path(__file__).resolve().parent.parent


# What a page shows only once it has drawn with data: a CSS selector and a text that element
# contains ("" for any), where possible the last thing the page draws; a page not named here
# counts as drawn once its heading is.
DRAWN = {
    "push": ("[data-testid='stPageLink']", "Alerts detection recorded"),
    "overview": ("[data-testid='stDataFrame']", ""),
    "trends": ("[data-testid='stVegaLiteChart'] svg.marks .points_marks path", ""),
    "compare": ("[data-testid='stCaptionContainer']", "Verdicts use CI's rule"),
    "alerts": ("[data-testid='stDataFrame']", ""),
    # Kernel's last section heading, shown whatever it can draw; its charts are SVG images the
    # server drew (app/kernel_charts.py), which DRAWN_JS waits for as it does for Vega-Lite charts.
    "kernel": ("h3", "Roofline"),
    "sql": ("textarea", ""),
    "run": ("[data-testid='stDataFrame']", ""),
}
# Every page, in the navigation's order: its URL path and its DRAWN marker.
BROWSER_PAGES = tuple((page.path, *DRAWN.get(page.key, ("h1", page.title))) for page in DECLARED_PAGES)
# Checked by the page itself on every animation frame (Playwright's `polling="raf"`). The page
# counts as drawn when that element is visible, every Vega-Lite chart on it has drawn visibly
# (Streamlit's chart element first draws hidden, before it knows its width), every chart image the
# server drew is decoded (`complete`, a natural width) and visible, and Streamlit is idle
# (no running indicator, no skeleton), and all of that holds for SETTLE_MS: a page whose first
# section is drawn while later ones are still coming is not drawn yet. Returned: the
# milliseconds from navigation start to the start of that settled state, by the page's clock.
# Timed in the page, not by polling from outside: Playwright's selector wait retries after 0, 20,
# 50, 100, 100 and then every 500 ms, so a page drawn just after one check was reported up to
# half a second late (docs/benchmarks/dashboard.md, "The benchmark's own wait").
SETTLE_MS = 200
DRAWN_JS = """([css, text, settleMs]) => {
  const visible = (e) => e.checkVisibility({visibilityProperty: true});
  const shown = [...document.querySelectorAll(css)].some((e) => (!text || e.textContent.includes(text)) && visible(e));
  const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')].every((chart) => {
    const svg = chart.querySelector("svg.marks");
    return svg !== null && visible(svg);
  }) && [...document.querySelectorAll("img[src^='data:image/svg+xml']")].every(
    (img) => img.complete && img.naturalWidth > 0 && visible(img));
  const busy = document.querySelector('[data-testid="stStatusWidget"]') || document.querySelector('[data-testid="stSkeleton"]');
  const now = performance.now();
  if (!(shown && charts && !busy)) {
    window.__drawnSince = undefined;
    return 0;
  }
  window.__drawnSince ??= now;
  return now - window.__drawnSince >= settleMs ? window.__drawnSince : 0;
}"""

# A fixed piece of JavaScript, timed in the idle page before every warm load: how fast this
# machine runs the browser at that moment. A shared 2-core VM runs the same code at speeds a
# factor of 1.5-2 apart for minutes at a time; with this beside each load, a run met in the slow
# state can be recognised (docs/benchmarks/dashboard.md, "The benchmark's own wait, and the CPU reference").
CPU_REFERENCE_JS = """() => {
  const started = performance.now();
  const values = [];
  for (let i = 0; i < 300000; i++) values.push((i * 7919) % 100003);
  values.sort((a, b) => a - b);
  let text = "";
  for (let i = 0; i < 30000; i++) text += String.fromCharCode(97 + (values[i * 7] % 26));
  return [performance.now() - started, text.length];
}"""


def cpu_reference_ms(page) -> float:
    """Milliseconds the page takes to run CPU_REFERENCE_JS once (the page must be idle)."""
    return float(page.evaluate(CPU_REFERENCE_JS)[0])


def bench_browser_servers(db: str, warm_repeats: int, servers: int, pages: list[str] | None) -> list[dict]:
    """`bench_browser` of each page (BROWSER_PAGES, or only `pages` by name: push, overview, ...)
    `servers` times, each time in a fresh server process and a fresh browser profile: a page has
    one cold load per server, so the median over several is what a shared machine can report.
    Per page: `cold_s` the median cold load, `cold_all_s` each, and the warm loads pooled."""
    merged = []
    for path, css, text in [p for p in BROWSER_PAGES if not pages or (p[0] or "push") in pages]:
        runs = [bench_browser(db, warm_repeats, path, css, text) for _ in range(servers)]
        colds = [r["cold_s"] for r in runs]
        warm = [w for r in runs for w in r["warm_s"]]
        merged.append(
            {
                **runs[0],
                "cold_s": statistics.median(colds),
                "cold_all_s": colds,
                "server_start_s": statistics.median(r["server_start_s"] for r in runs),
                "next_s": max(r["next_s"] for r in runs),
                "warm_s": warm,
                "warm_median_s": statistics.median(warm),
                "warm_max_s": max(warm),
                "cpu_reference_ms": [c for r in runs for c in r["cpu_reference_ms"]],
                "problems": sorted({p for r in runs for p in r["problems"]}),
            }
        )
    return merged


def bench_browser(db: str, warm_repeats: int, path: str, css: str, text: str) -> dict:
    """One page (its URL path, and the marker DRAWN_JS waits for) loaded in headless Chromium
    against a fresh `attnwatch dashboard` on `db`, in a fresh browser profile: its cold load,
    the next two, then `warm_repeats` warm ones."""
    import shutil
    import signal
    import socket
    import tempfile
    import urllib.request

    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        raise SystemExit("bench_dashboard --browser: chromium not found on PATH (make browser)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, ATTNWATCH_DB=str(db), PYTHONPATH=str(REPO))
    launched = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "attnwatch", "--db", str(db), "dashboard", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        for _ in range(2400):
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read().strip() == b"ok":
                    break
            except OSError:
                time.sleep(0.05)
        server_start = time.perf_counter() - launched
        with sync_playwright() as pw, tempfile.TemporaryDirectory(prefix="bench-profile-") as profile:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=executable,
                args=["--headless", "--no-sandbox", "--disable-gpu"],
                viewport={"width": 1500, "height": 1200},
            )
            page = context.new_page()

            def load() -> float:
                """Seconds from navigation start until the page is drawn, as the page's clock reads."""
                page.goto(f"http://127.0.0.1:{port}/{path}", wait_until="domcontentloaded", timeout=300_000)
                drawn = page.wait_for_function(DRAWN_JS, arg=[css, text, SETTLE_MS], polling="raf", timeout=300_000)
                return drawn.json_value() / 1000

            cold = load()
            failed = "could not read" in page.locator("[data-testid='stMain']").inner_text()
            following = max(load() for _ in range(2))
            reference, warm = [], []
            for _ in range(warm_repeats):
                reference.append(cpu_reference_ms(page))
                warm.append(load())
            context.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return {
        "page": path or "push",
        "cold_s": cold,
        "server_start_s": server_start,
        "next_s": following,
        "warm_median_s": statistics.median(warm),
        "warm_max_s": max(warm),
        "warm_s": warm,
        "cpu_reference_ms": reference,
        "problems": ["a read failed"] if failed else [],
    }
