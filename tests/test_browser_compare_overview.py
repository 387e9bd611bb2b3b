"""Compare, Overview, Run, This push, Trends, Kernel and SQL in a real headless Chromium at 1440x900
(issue 44), on the shipped H200 sample (docs/data/demo, ingested and detected through the CLI, as
`make demo` does) and a CPU main run whose GPU-only variants were skipped, as on a newcomer's
machine:

  - the columns a reader needs first are on screen whole: each column ends inside the grid's
    visible width, and its header and every cell's text fit in it (measured with the grid's own
    font in the browser), and no summary tile's label is cut;
  - Compare, switched from the H200 to the CPU, drops the H200 runs (saying so), lists the CPU's
    runs only, and the URL it leaves reopens the same after a reload;
  - Overview's regression and improvement tiles say what This push says for the newest push.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from browser_support import ProfileBrowser, PAGE_TIMEOUT_MS, chromium, playwright, serve, wait_idle
from bundle_factory import SHAPES, case_id, make_bundle
from test_app_overview_devices import CPU_ENV, LONG_VARIANT
from test_browser_layout import visit as layout_visit

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
DEMO_HISTORY = REPO / "docs" / "data" / "demo" / "h200-demo-history.tgz"
VIEWPORT = {"width": 1440, "height": 900}
H200 = "NVIDIA H200"
# The newest push of the sample and the run before it (docs/data/demo/README.md).
BASE_RUN, HEAD_RUN = "20261126T033500Z-8f98dca893-d3ecee", "20261126T033551Z-2f4b244b1a-2b4afe"
CPU_RUN, CPU_PR_RUN = "cpu-main-demo", "cpu-pr-demo"
CPU_VARIANTS = ("sdpa", "torch_3op", LONG_VARIANT)

# Per page: the table's columns a reader needs first, left to right (the first names the table).
FIRST_NEEDED = {
    f"overview?gpu={H200}": [
        "variant",
        "shape",
        "dtype",
        "causal",
        "correct",
        "median µs (events)",
        "Δ %",
        "last 20 main runs",
    ],
    "overview?gpu=cpu": [
        "variant",
        "shape",
        "dtype",
        "causal",
        "correct",
        "median µs (CPU wall clock)",
        "Δ %",
        "last 20 main runs",
    ],
    f"compare?gpu={H200}&base={BASE_RUN}&head={HEAD_RUN}": [
        "verdict",
        "variant",
        "shape",
        "dtype",
        "causal",
        "Δ %",
        "low",
        "high",
        "base µs (events)",
        "head µs (events)",
    ],
    f"compare?gpu=cpu&base={CPU_PR_RUN}&head={CPU_RUN}": [
        "verdict",
        "variant",
        "shape",
        "dtype",
        "causal",
        "Δ %",
        "low",
        "high",
        "base µs (CPU wall clock)",
        "head µs (CPU wall clock)",
    ],
    f"run?run={HEAD_RUN}": ["case", "status", "correct", "median µs (events)", "TFLOPS (events)", "gap to sdpa"],
    f"run?run={CPU_RUN}": ["case", "status", "correct", "median µs (CPU wall clock)", "TFLOPS (CPU wall clock)"],
    # After "|": what to click first (";" between), for a table drawn on request or in an expander.
    "|Every case of the push": [
        "GPU",
        "case",
        "verdict",
        "correctness",
        "Δ %",
        "low",
        "high",
        "before µs (events)",
        "after µs (events)",
    ],
    f"trends?gpu={H200}": ["id", "series", "kind", "status", "metric", "change %", "run started"],
    f"kernel?gpu={H200}|Build reports": [
        "commit",
        "ok",
        "registers/thread",
        "shared mem B/block",
        "spill stores B",
        "spill loads B",
        "stack B",
    ],
    f"kernel?gpu={H200}|Kernels of": [
        "#",
        "kernel",
        "duration ns",
        "SM throughput %",
        "DRAM throughput %",
        "occupancy %",
        "tensor pipe %",
    ],
    f"kernel?gpu={H200}|Roofline points": ["point", "shape", "TFLOP/s", "FLOP/byte", "% of peak"],
    # The first example query's result: the columns that say which case a row is (its numbers keep the grid's sizing).
    "sql|Run query": ["gpu_name", "operator", "variant", "shape_id", "dtype", "causal", "status"],
}

# Every drawn grid's columns as the grid lays them out (read from the grid component's own
# props), with the width its header and its widest cell text need in the grid's fonts.
GRIDS = """() => [...document.querySelectorAll('[data-testid=stDataFrame]')].map(d => {
  const canvas = d.querySelector('canvas'); if (!canvas) return null;
  let f = canvas[Object.keys(canvas).find(k => k.startsWith('__reactFiber$'))];
  while (f && !(f.memoizedProps && Array.isArray(f.memoizedProps.columns)
                && f.memoizedProps.columns.every(c => typeof c.width === 'number'))) f = f.return;
  if (!f) return null;
  const p = f.memoizedProps, pad = p.theme.cellHorizontalPadding;
  const ctx = document.createElement('canvas').getContext('2d');
  const measure = (font, text) => { ctx.font = font; return ctx.measureText(text).width; };
  let left = 0;
  const columns = p.columns.map((c, i) => {
    let cell = 0;
    for (let r = 0; r < Math.min(p.rows, 500); r++) { const content = p.getCellContent([i, r]);
      if (typeof content.displayData === 'string') cell = Math.max(cell, measure(p.theme.baseFontFull, content.displayData)); }
    const out = {title: c.title, left, width: c.width, header: measure(p.theme.headerFontFull, c.title) + 2 * pad,
                 cell: cell ? cell + 2 * pad : 0};
    left += c.width; return out; });
  return {visible: d.querySelector('.dvn-scroller').clientWidth, columns};
}).filter(Boolean)"""
TILES = """() => [...document.querySelectorAll('[data-testid=stMetric]')].map(m => {
  const label = m.querySelector('[data-testid=stMetricLabel]'); const text = label.querySelector('p') || label;
  return {label: label.innerText.trim(), value: m.querySelector('[data-testid=stMetricValue]').innerText.trim(),
          cut: text.scrollWidth > text.clientWidth + 1}; })"""


def _cli(db: Path, *args: str) -> str:
    env = dict(os.environ, ATTNWATCH_DB=str(db), GITHUB_REF_NAME="main", ATTNWATCH_REPO="attnwatch")
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"attnwatch {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _cpu_bundle(work: Path, run_id: str, hours: int, **options) -> Path:
    """A CPU run of the sample's repository, after the sample: its GPU-only variant skipped."""
    cases = [case_id(v, s.id, "fp16", c) for v in CPU_VARIANTS for s in SHAPES[:2] for c in (False, True)]
    return make_bundle(
        work / run_id,
        run_id=run_id,
        repo="attnwatch",
        variants=CPU_VARIANTS,
        environment=CPU_ENV,
        latency_scale=20000.0,
        timing_overrides={c: {"timing_mode": "cpu_wall"} for c in cases},
        statuses={c: "skipped" for c in cases if LONG_VARIANT in c},
        with_builds=False,
        started_at=datetime(2026, 12, 1, hours, tzinfo=timezone.utc),
        **options,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    executable = chromium()
    sync_playwright = playwright()
    work = tmp_path_factory.mktemp("browser_compare_overview")
    db = work / "history.duckdb"
    with tarfile.open(DEMO_HISTORY) as tar:
        tar.extractall(work / "sample", filter="data")
    _cli(db, "ingest", *map(str, sorted((work / "sample" / "h200-demo-history").iterdir())))
    _cli(
        db,
        "ingest",
        str(_cpu_bundle(work, CPU_PR_RUN, 8, seed=4, branch="cpu-tiles", pr_number=7, trigger="pull_request")),
        str(_cpu_bundle(work, CPU_RUN, 9, seed=5)),
    )
    _cli(db, "detect")
    with serve(db, work / "dashboard.log") as url, sync_playwright() as pw:
        browser = ProfileBrowser(pw, executable, work / "profile")
        page = browser.new_page(viewport=VIEWPORT)
        try:
            yield url, page
        finally:
            browser.close()


def visit(page, url: str, path: str, header: str | None = None) -> None:
    """Open `path` of the server at `url` once drawn (test_browser_layout's own wait)."""
    layout_visit((url, page, None), path, header)


def open_grid(page, clicks: str, header: str) -> None:
    """Click each of `clicks` (";" between: a toggle, an expander, a button), then wait until a
    grid shows `header`, or the page's only grid is drawn."""
    for label in filter(None, clicks.split(";")):
        page.get_by_text(label).first.click()
        page.wait_for_timeout(1500)
        wait_idle(page)
    page.wait_for_function(
        """h => { const shown = [...document.querySelectorAll('[data-testid=stDataFrame]')]
                      .filter(d => d.getClientRects().length && d.querySelector('canvas') && d.querySelector('th'));
                  return shown.some(d => [...d.querySelectorAll('th')].some(t => t.textContent === h))
                         || shown.length === 1; }""",
        arg=header,
        timeout=PAGE_TIMEOUT_MS,
    )


def the_grid(grids: list[dict], wanted: list[str]) -> dict:
    """The grid whose first columns are `wanted`'s first two, else the page's only grid (so a
    table whose columns are in another order is still measured, and its cuts reported)."""
    named = [g for g in grids if [c["title"] for c in g["columns"][:2]] == wanted[:2]]
    found = named or grids
    assert len(found) == 1, [[c["title"] for c in g["columns"][:4]] for g in grids]
    return found[0]


@pytest.mark.parametrize("key", list(FIRST_NEEDED))
def test_first_needed_columns_are_whole_at_1440(served, key):
    url, page = served
    wanted = FIRST_NEEDED[key]
    path, _, clicks = key.partition("|")
    visit(page, url, path)
    open_grid(page, clicks, wanted[0])
    grid = the_grid(page.evaluate(GRIDS), wanted)
    first = grid["columns"][: len(wanted)]
    problems = []
    for c in first:
        title = c["title"]
        if c["left"] + c["width"] > grid["visible"]:
            problems.append(f"{title!r} ends at {c['left'] + c['width']} px, past the visible {grid['visible']} px")
        if c["header"] > c["width"]:
            problems.append(f"header {title!r} needs {c['header']:.0f} px, has {c['width']}")
        if c["cell"] > c["width"]:
            problems.append(f"a cell of {title!r} needs {c['cell']:.0f} px, has {c['width']}")
    assert not problems, "\n".join(problems)
    assert [c["title"] for c in first] == wanted, [c["title"] for c in grid["columns"]]
    cut = [t["label"] for t in page.evaluate(TILES) if t["cut"]]
    assert not cut, f"tile labels cut: {cut}"


def _picker_values(page) -> list[str]:
    return page.evaluate(
        "() => [...document.querySelectorAll('[data-testid=stSelectbox] input[role=combobox]')].map(i => i.value)"
    )


def test_compare_switched_to_another_gpu_drops_the_pinned_runs_and_keeps_that_after_a_reload(served):
    url, page = served
    visit(page, url, f"compare?gpu={H200.replace(' ', '+')}&base={BASE_RUN}&head={HEAD_RUN}", "verdict")
    page.get_by_test_id("stSelectbox").filter(has_text="GPU").first.locator("input").click()
    page.get_by_role("option", name="cpu", exact=True).click()
    page.wait_for_timeout(1500)
    wait_idle(page)
    for attempt in ("after the switch", "after a reload"):
        text = " ".join(page.locator("[data-testid=stMain]").inner_text().split())
        assert "Dropped run(s) of another device" in text or attempt == "after a reload", text[:600]
        assert BASE_RUN not in page.url and HEAD_RUN not in page.url, (attempt, page.url)
        values = _picker_values(page)
        assert values[0] == "cpu", (attempt, values)
        assert not any(BASE_RUN in v or HEAD_RUN in v for v in values), (attempt, values)
        assert any(CPU_RUN in v for v in values) and any(CPU_PR_RUN in v for v in values), (attempt, values)
        assert "timed by mixed" not in text and "rule for cpu" in text, (attempt, text[:600])
        visit(page, url, page.url[len(url) + 1 :])  # a reload of the URL the switch left


def test_overview_tiles_say_what_this_push_says(served):
    url, page = served
    visit(page, url, "")
    text = " ".join(page.locator("[data-testid=stMain]").inner_text().split())
    line = re.search(rf"{H200}[^·]*· (\d+) regression\(s\) ·.*?· (\d+) improvement\(s\)", text)
    assert line, text[:1500]
    pushed = {"regressions": line.group(1), "improvements": line.group(2)}
    assert pushed == {"regressions": "2", "improvements": "2"}  # docs/data/demo/README.md: push 8 against 7
    visit(page, url, f"overview?gpu={H200.replace(' ', '+')}", "variant")
    tiles = {t["label"]: t["value"] for t in page.evaluate(TILES)}
    assert {k: tiles.get(k) for k in pushed} == pushed, tiles
