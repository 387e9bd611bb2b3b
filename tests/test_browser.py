"""The dashboard in a real headless Chromium: `attnwatch dashboard` serves a fixture history on
a free loopback port, Playwright visits every page, waits for its charts to draw (Vega-Lite's on
Trends, the SVG images the server draws on Alerts and Kernel) and saves a screenshot of each (under the test's tmp dir, and under $ATTNWATCH_SCREENSHOTS when set).

Chromium is the system's (Debian's package), driven through `executable_path`; nothing is
downloaded. Without it the test skips locally but fails when $CI is set, so CI cannot pass by
silently skipping.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from app_history import HOSTILE_MESSAGE, add_real_ncu_run, build_history, main_run_id
from browser_support import ProfileBrowser, PAGE_TIMEOUT_MS, SVG_IMAGE, chromium, playwright, serve
from browser_support import wait_idle as _wait_idle
from attnwatch.history.links import PAGES as DECLARED_PAGES

pytestmark = pytest.mark.browser

TREND_POINTS = "[data-testid='stVegaLiteChart'] svg.marks .points_marks path"
TABLE = "[data-testid='stDataFrame']"
# What shows a page has drawn with this history (a page not named here: its heading), and the
# query a page is opened with where it needs one.
DRAWN = {
    "push": "[data-testid='stMarkdown']",
    "overview": TABLE,
    "trends": TREND_POINTS,
    "compare": TABLE,
    "alerts": TABLE,
    "kernel": SVG_IMAGE,
    "sql": "textarea",
    "run": TABLE,
}
QUERY = {"kernel": "?variant=sdpa", "run": f"?run={main_run_id(6)}"}
# (url path, title, what shows the page has drawn) of every page, in the navigation's order
PAGES = tuple((page.path + QUERY.get(page.key, ""), page.title, DRAWN.get(page.key, "h1")) for page in DECLARED_PAGES)


@pytest.fixture(scope="module")
def dashboard_url(tmp_path_factory, fixtures_dir):
    """`attnwatch dashboard` over a fixture history, always terminated at the end."""
    work = tmp_path_factory.mktemp("browser_history")
    db = work / "history.duckdb"
    build_history(db, work / "bundles")
    add_real_ncu_run(db, work / "bundles", fixtures_dir)
    with serve(db, work / "dashboard.log") as url:
        yield url


def _screenshot_dirs(tmp_path: Path) -> list[Path]:
    dirs = [tmp_path]
    extra = os.environ.get("ATTNWATCH_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        dirs.append(Path(extra))
    return dirs


@pytest.fixture(scope="module")
def chromium_path() -> str:
    """Checked before the server starts: a missing browser skips (or, under CI, fails) at once."""
    path = chromium()
    playwright()
    return path


@pytest.fixture(scope="module")
def browser(chromium_path, tmp_path_factory):
    """The file's Chromium, one profile for its pages (browser_support.ProfileBrowser)."""
    with playwright()() as pw:
        instance = ProfileBrowser(pw, chromium_path, tmp_path_factory.mktemp("browser-profile"))
        try:
            yield instance
        finally:
            instance.close()


def test_every_page_draws_in_chromium(browser, dashboard_url, tmp_path):
    dialogs: list[str] = []
    page = browser.new_page(viewport={"width": 1500, "height": 2600})
    try:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        for path, title, drawn in PAGES:
            page.goto(f"{dashboard_url}/{path}", wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
            page.get_by_role("heading", name=title).first.wait_for(timeout=PAGE_TIMEOUT_MS)
            page.locator(drawn).first.wait_for(timeout=PAGE_TIMEOUT_MS)
            if path == "sql":  # run the loaded example: the results table must draw too
                page.get_by_role("button", name="Run query").click()
                page.locator(TABLE).filter(visible=True).first.wait_for(timeout=PAGE_TIMEOUT_MS)
            _wait_idle(page)
            name = (path.split("?")[0] or "overview") + ".png"
            for directory in _screenshot_dirs(tmp_path):
                page.screenshot(path=str(directory / name), full_page=True)
            assert page.locator("[data-testid='stException']").count() == 0, f"{title}: a traceback is shown"
            assert "could not read" not in page.locator("[data-testid='stMain']").inner_text(), (
                f"{title}: a read failed"
            )
            assert (tmp_path / name).stat().st_size > 10_000

        # Clicking a point of the trend opens that point's run.
        page.goto(f"{dashboard_url}/trends", wait_until="domcontentloaded")
        point = page.locator(TREND_POINTS).last
        point.wait_for(timeout=PAGE_TIMEOUT_MS)
        box = point.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.get_by_role("heading", name="Run").first.wait_for(timeout=PAGE_TIMEOUT_MS)
        assert "run=" in page.url

        # The hostile commit message is shown as text on its run's page, never interpreted.
        page.goto(f"{dashboard_url}/run?run={main_run_id(6)}", wait_until="domcontentloaded")
        page.get_by_text("<script>alert('x')</script>", exact=False).first.wait_for(timeout=PAGE_TIMEOUT_MS)
        main = page.locator("[data-testid='stMain']")
        assert main.locator("script").count() == 0
        assert main.locator("b", has_text="bold").count() == 0
        assert HOSTILE_MESSAGE in main.inner_text()
    finally:
        page.close()
    assert dialogs == [], f"a commit message ran script: {dialogs}"


@contextlib.contextmanager
def opened_trends(browser, dashboard_url: str, path: str = "trends"):
    """A 1500x1200 page of the file's browser navigated to the served Trends page, or `path` (its
    content not waited for)."""
    page = browser.new_page(viewport={"width": 1500, "height": 1200})
    try:
        page.goto(f"{dashboard_url}/{path}", wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
        yield page
    finally:
        page.close()


def test_a_trend_tooltip_shows_a_hostile_commit_message_as_text(browser, dashboard_url):
    """Hovering the point of the run whose commit message holds markup shows that message as text
    in the tooltip (Vega's tooltip escapes what it shows): no element is made of it, no script runs."""
    dialogs: list[str] = []
    with opened_trends(browser, dashboard_url) as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        points = page.locator(TREND_POINTS)
        points.first.wait_for(timeout=PAGE_TIMEOUT_MS)
        _wait_idle(page)
        tooltip = page.locator("#vg-tooltip-element")
        shown = ""
        for k in range(points.count()):  # the hostile run is one of the plotted points
            points.nth(k).hover()
            tooltip.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
            shown = tooltip.inner_text()
            if main_run_id(6) in shown:
                break
        assert main_run_id(6) in shown, "no plotted point is the hostile commit's run"
        assert "<script>alert('x')</script>" in shown
        assert tooltip.locator("script").count() == 0 and tooltip.locator("b").count() == 0
    assert dialogs == []


def test_benchmark_counts_a_page_drawn_only_once_its_chart_shows(browser, dashboard_url):
    """scripts/bench_dashboard.py --browser (scripts/dashboard_browser.py) times a page by the page's
    own clock until DRAWN_JS holds: the page's content visible, every chart drawn visibly, Streamlit
    idle, for SETTLE_MS. Each part is checked on the served Trends page: a hidden chart, a running
    indicator, and a state that has not yet lasted SETTLE_MS each keep the page from counting as
    drawn."""
    from attnwatch.scripts.dashboard_browser import BROWSER_PAGES, DRAWN_JS, SETTLE_MS

    css, text = next((c, t) for p, c, t in BROWSER_PAGES if p == "trends")
    with opened_trends(browser, dashboard_url) as page:
        drawn_ms = page.wait_for_function(
            DRAWN_JS, arg=[css, text, SETTLE_MS], polling="raf", timeout=PAGE_TIMEOUT_MS
        ).json_value()
        loaded_ms = page.evaluate("() => performance.now()")

        def check_now_and_settled(change: str) -> tuple[float, float]:
            """DRAWN_JS right after `change` (run in the page), then again SETTLE_MS later."""
            page.evaluate(f"() => {{ window.__drawnSince = undefined; {change} }}")
            now = page.evaluate(DRAWN_JS, [css, text, SETTLE_MS])
            page.wait_for_timeout(SETTLE_MS + 50)
            return now, page.evaluate(DRAWN_JS, [css, text, SETTLE_MS])

        chart = "document.querySelector('[data-testid=\"stVegaLiteChart\"]')"
        hidden = check_now_and_settled(f"{chart}.style.visibility = 'hidden';")
        running = check_now_and_settled(
            f"{chart}.style.visibility = '';"
            " document.body.insertAdjacentHTML('beforeend', '<div data-testid=\"stStatusWidget\">x</div>');"
        )
        idle_again = check_now_and_settled("document.querySelector('[data-testid=\"stStatusWidget\"]').remove();")
    assert 0 < drawn_ms <= loaded_ms - SETTLE_MS  # the start of the settled state, by the page's clock
    assert hidden == (0, 0) and running == (0, 0)
    assert idle_again[0] == 0 and idle_again[1] > loaded_ms  # drawn again, but only once settled


def test_benchmark_counts_the_kernel_page_drawn_once_its_chart_images_show(browser, dashboard_url):
    """Kernel draws no chart in the browser (its charts are SVG images the server draws): DRAWN_JS holds
    there once its images are decoded and visible, and a hidden one keeps the page from counting
    as drawn."""
    from attnwatch.scripts.dashboard_browser import BROWSER_PAGES, DRAWN_JS, SETTLE_MS

    css, text = next((c, t) for p, c, t in BROWSER_PAGES if p == "kernel")
    with opened_trends(browser, dashboard_url, "kernel" + QUERY["kernel"]) as page:
        page.wait_for_function(DRAWN_JS, arg=[css, text, SETTLE_MS], polling="raf", timeout=PAGE_TIMEOUT_MS)
        assert page.locator(SVG_IMAGE).count() >= 2 and page.locator("[data-testid='stVegaLiteChart']").count() == 0
        page.evaluate(
            f"() => {{ window.__drawnSince = undefined; document.querySelector(\"{SVG_IMAGE}\").style.visibility = 'hidden'; }}"
        )
        page.wait_for_timeout(SETTLE_MS + 50)
        assert page.evaluate(DRAWN_JS, [css, text, SETTLE_MS]) == 0
