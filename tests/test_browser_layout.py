"""The dashboard at 1440x900 in a real headless Chromium (issue 26): what matters first on each
page is on screen without scrolling sideways, nothing is fetched from outside the dashboard's own
server, there is no "Deploy" button, and charts with commits on x keep every commit in its place whatever a
hash looks like. History: tests/commit_axis_history.py (hashes such as '1380e60'); server and
browser: tests/browser_support.py."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from browser_support import ProfileBrowser, PAGE_TIMEOUT_MS, chromium, playwright, serve, svg_charts_js, wait_idle
from commit_axis_history import build_commit_axis_history, commit_sha

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1440, "height": 900}
# Per page: the column headers that must be on screen at 1440 px, left to right.
KEY_COLUMNS = {
    "overview": [
        "variant",
        "shape",
        "dtype",
        "causal",
        "correct",
        "median µs (events)",
        "Δ %",
        "µs/head",
        "TFLOPS (events)",
        "gap to sdpa",
        "last 20 main runs",
    ],
    "compare?base=h200-main-05&head=h200-main-06": [
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
    "run?run=h200-main-09": ["case", "status", "correct", "median µs (events)", "TFLOPS (events)", "gap to sdpa"],
    "alerts": ["id", "status", "kind", "metric", "case", "change", "before", "after", "plot"],
}
STATE = """() => ({
  pageWidth: document.scrollingElement.scrollWidth,
  deploy: [...document.querySelectorAll('button')].filter(b => b.textContent.trim() === 'Deploy').length,
  headers: [...document.querySelectorAll('[data-testid=stDataFrame]')].map(d => [...d.querySelectorAll('th')].map(t => t.textContent)),
  chips: [...document.querySelectorAll('[data-testid=stMultiSelect]')].map(m => { const box = m.getBoundingClientRect();
      return [...m.querySelectorAll('[data-tag]')].map(c => { const b = c.getBoundingClientRect(); const text = c.querySelector('span');
          return {name: c.getAttribute('aria-label'), inside: b.width > 0 && b.left >= box.left && b.right <= box.right + 0.5,
                  cut: text.scrollWidth > text.clientWidth + 1}; }); }),
  pickers: [...document.querySelectorAll('[data-testid=stSelectbox] input[role=combobox]')].map(i => ({value: i.value, cut: i.scrollWidth > i.clientWidth + 1})),
  charts: [...document.querySelectorAll('[data-testid=stVegaLiteChart] svg.marks')].map(svg => { const box = svg.getBoundingClientRect();
      const xs = [...svg.querySelectorAll('.points_marks path')].map(p => { const b = p.getBoundingClientRect(); return Math.round(b.left + b.width / 2); });
      return {xs: [...new Set(xs)].sort((a, b) => a - b), left: box.left, right: box.right,
              labels: [...svg.querySelectorAll('.role-axis-label text')].map(t => t.textContent)}; }),
})"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    executable = chromium()
    sync_playwright = playwright()
    work = tmp_path_factory.mktemp("browser_layout")
    db = build_commit_axis_history(work / "history.duckdb", work / "bundles")
    with serve(db, work / "dashboard.log") as url, sync_playwright() as pw:
        browser = ProfileBrowser(pw, executable, work / "profile")
        page = browser.new_page(viewport=VIEWPORT)
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        try:
            yield url, page, requests
        finally:
            browser.close()


def visit(served, path: str, header: str | None = None) -> dict:
    """Open `path`, wait until it is drawn (and, given `header`, until a grid shows that column)."""
    url, page, _ = served
    page.goto(f"{url}/{path}", wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
    page.locator("h1").first.wait_for(timeout=PAGE_TIMEOUT_MS)
    page.wait_for_timeout(1500)  # let the first script run start before waiting for it to end
    wait_idle(page)
    if header:
        page.wait_for_function(
            "h => [...document.querySelectorAll('[data-testid=stDataFrame] th')].some(t => t.textContent === h)",
            arg=header,
            timeout=PAGE_TIMEOUT_MS,
        )
    return page.evaluate(STATE)


@pytest.mark.parametrize("path", list(KEY_COLUMNS))
def test_key_columns_are_on_screen_at_1440(served, path):
    state = visit(served, path, KEY_COLUMNS[path][0])
    assert state["pageWidth"] <= VIEWPORT["width"], "the page itself scrolls sideways"
    key = KEY_COLUMNS[path]
    # A grid lists (for assistive technology) the columns it draws on screen: the table whose
    # first key column is there must have every key column there.
    (table,) = [h for h in state["headers"] if key[0] in h and key[1] in h]
    missing = [c for c in key if c not in table]
    assert not missing, f"off screen at 1440 px: {missing}; on screen: {table}"
    assert not [p for p in state["pickers"] if p["cut"]], state["pickers"]


def test_every_load_stays_on_the_dashboards_own_server_without_a_deploy_button(served):
    url, _, requests = served
    for path in ("", "overview", "trends", "compare", "alerts", "kernel", "sql", "run"):
        assert visit(served, path)["deploy"] == 0, path
    origin = urlsplit(url).netloc
    outside = sorted(
        {urlsplit(r).netloc for r in requests if urlsplit(r).scheme in ("http", "https", "ws", "wss")} - {origin}
    )
    assert not outside, f"fetched from outside the dashboard's server: {outside}"


def test_trend_link_with_a_numeric_looking_commit_range_draws_every_run(served):
    state = visit(
        served, f"trends?variants=sdpa,sdpa_efficient,triton_fa2,cuda_wmma&commits={commit_sha(3)}..{commit_sha(6)}"
    )
    (chart,) = state["charts"]
    xs = chart["xs"]  # each run at its own place across the plot, not squeezed onto one spot
    assert len(xs) >= 8 and xs[-1] - xs[0] > 0.6 * (chart["right"] - chart["left"]), chart
    assert commit_sha(3)[:7] in chart["labels"] and commit_sha(6)[:7] in chart["labels"]  # labelled by commit
    chips = state["chips"][0]
    assert [c["name"] for c in chips] == ["sdpa", "sdpa_efficient", "triton_fa2", "cuda_wmma"]
    assert all(c["inside"] and not c["cut"] for c in chips), chips


# The step chart's SVG at the image's own scale: its title's and legend entries' boxes.
STEP_CHART_BOXES = svg_charts_js(
    "({svg: box(svg), title: box(svg.querySelector('[data-role=title]')), "
    "legend: [...svg.querySelectorAll('[data-role=legend]')].map(box)})"
)


def _overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def test_alert_step_chart_title_clear_of_its_legend(served):
    """The server-drawn step chart (app/step_chart.py), an SVG image: its title and each legend
    entry clear of one another and inside the chart at 1440 px (measured on a test-only copy of
    the image's SVG drawn at the image's width)."""
    visit(served, "alerts")
    _, page, _ = served
    page.locator("img[src^='data:image/svg+xml']").first.wait_for(timeout=PAGE_TIMEOUT_MS)
    (chart,) = page.evaluate(STEP_CHART_BOXES)
    entries = chart["legend"]
    assert len(entries) == 4
    assert not any(_overlap(chart["title"], entry) for entry in entries), chart
    assert not any(_overlap(a, b) for i, a in enumerate(entries) for b in entries[i + 1 :]), entries
    assert all(chart["svg"]["left"] <= e["left"] and e["right"] <= chart["svg"]["right"] + 0.5 for e in entries), chart
