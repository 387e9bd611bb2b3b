"""The first page in a real headless Chromium at 1440x900, a common laptop window: nothing that
matters is cut at the right edge or lies off-screen, correctness failures come first, and a
regression's answer to "real slowdown?" is on screen for every case line.

The history is the two-GPU push history (tests/app_history.py): one cause (triton_fa2 slower)
on 8 cases over two GPUs, one correctness failure."""

from __future__ import annotations

import pytest

from app_history import build_push_history
from browser_support import CHROMIUM_ARGS, PAGE_TIMEOUT_MS, chromium, playwright, serve, wait_idle

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1440, "height": 900}

# Every visible text element of the page's main area that is cut (its text wider than its box
# where the box hides the overflow) or reaches past the window's right edge. Data grids are
# canvases with their own scrolling and are left out (they sit in collapsed expanders here).
CUT_JS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const right = window.innerWidth;
  const found = [];
  for (const e of main.querySelectorAll('p, a, span, td, th, summary, h1, h2, h3, code, li')) {
    if (e.closest('[data-testid="stDataFrame"]') || !e.checkVisibility()) continue;
    const text = e.innerText.trim();
    if (!text) continue;
    const style = getComputedStyle(e);
    const hides = ['hidden', 'clip'].includes(style.overflowX) || style.textOverflow === 'ellipsis';
    const box = e.getBoundingClientRect();
    if ((hides && e.scrollWidth > e.clientWidth + 1) || box.right > right + 1) {
      found.push(text.slice(0, 80) + ` [${Math.round(box.right)} px, ${e.scrollWidth}/${e.clientWidth}]`);
    }
  }
  return found;
}"""


@pytest.fixture(scope="module")
def push_url(tmp_path_factory):
    chromium()
    playwright()
    work = tmp_path_factory.mktemp("browser_push")
    db = work / "history.duckdb"
    build_push_history(db, work / "bundles")
    with serve(db, work / "dashboard.log") as url:
        yield url


def test_this_push_fits_a_1440_window(push_url, tmp_path):
    with playwright()() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(push_url, wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
            page.get_by_role("heading", name="Improvements").first.wait_for(timeout=PAGE_TIMEOUT_MS)
            wait_idle(page)
            page.screenshot(path=str(tmp_path / "push-1440.png"), full_page=True)
            assert page.locator("[data-testid='stException']").count() == 0
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth"), (
                "the page scrolls sideways"
            )
            assert page.evaluate(CUT_JS) == []

            headings = page.locator("[data-testid='stMain'] h3").all_inner_texts()
            order = [h.split(" (")[0] for h in headings]
            assert order.index("Correctness failures") < order.index("Regressions"), headings

            # One cause, its 8 cases in a table whose last column answers the section's question.
            causes = page.locator("[data-testid='stExpander'] summary", has_text="triton_fa2")
            assert causes.count() == 1 and "8 case(s)" in causes.first.inner_text()
            table = page.locator("[data-testid='stMain'] table", has_text="real slowdown?").first
            answers = table.locator("tbody tr td:last-child").all_inner_texts()
            assert len(answers) == 8 and all(a.strip() not in ("", "—") for a in answers), answers
            for cell in table.locator("tbody tr td:last-child").all():
                box = cell.bounding_box()
                assert box["x"] + box["width"] <= VIEWPORT["width"], cell.inner_text()
        finally:
            browser.close()
