"""This push and Kernel on the shipped H200 sample, in a real headless Chromium at 1440x900.

This push names the newest push's cause as the PR comment does (the commit and its message, the
build report before → after, the counter rules' cause), calls the +11-15% change real though
its samples did not converge (its interval is decisive), and nothing of it is cut or off-screen.
Kernel opens on that variant, draws its spills, and keeps its roofline's decade labels apart."""

from __future__ import annotations

import pytest

from browser_support import CHROMIUM_ARGS, PAGE_TIMEOUT_MS, chromium, playwright, serve, wait_idle
from demo_sample import PUSH_HEAD, build_demo_history
from test_browser_push import CUT_JS, VIEWPORT

pytestmark = pytest.mark.browser

# Tick labels of a log axis (the roofline's) that overlap a neighbour on the same axis, by chart.
OVERLAPS_JS = """() => {
  const found = [];
  document.querySelectorAll('.js-plotly-plot').forEach((plot, index) => {
    for (const axis of ['xtick', 'ytick']) {
      if (plot._fullLayout[axis === 'xtick' ? 'xaxis' : 'yaxis'].type !== 'log') continue;
      const boxes = [...plot.querySelectorAll(`g.${axis} text`)].map(t => t.getBoundingClientRect())
        .filter(b => b.width > 0);
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1)
          found.push(`chart ${index} ${axis}`);
      }
    }
  });
  return found;
}"""


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory):
    chromium()
    playwright()
    work = tmp_path_factory.mktemp("browser_push_cause")
    db = build_demo_history(work / "history.duckdb", work)
    with serve(db, work / "dashboard.log") as url:
        yield url


def _open(pw, url):
    browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url, wait_until="domcontentloaded", timeout=PAGE_TIMEOUT_MS)
    return browser, page


def test_this_push_names_the_cause_of_the_regression(demo_url, tmp_path):
    with playwright()() as pw:
        browser, page = _open(pw, demo_url)
        try:
            page.get_by_role("heading", name="Improvements").first.wait_for(timeout=PAGE_TIMEOUT_MS)
            wait_idle(page)
            page.screenshot(path=str(tmp_path / "push-cause.png"), full_page=True)
            cause = page.locator("[data-testid='stExpander']", has_text="real slowdown?").first
            label = cause.locator("summary").inner_text()
            assert "cuda_wmma" in label and "real slowdown? yes 2" in label, label
            why = cause.locator("p", has_text="Commit").first.inner_text()
            assert f"Commit {PUSH_HEAD}: cuda_wmma: ask ptxas for 4 CTAs per SM at D=64" in why, why
            assert "Build (ptxas, before → after): registers/thread 157 → 128; spill stores 0 → 16 B" in why, why
            assert (
                "ncu cause (h100_small fp16 causal; 2 of 2 cases profiled): blocks/SM allowed by registers 3 → 4" in why
            )
            rows = cause.locator("table tbody tr").all_inner_texts()
            assert len(rows) == 2 and all("yes: the interval clears ±2%" in r for r in rows), rows
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
            assert page.evaluate(CUT_JS) == []
        finally:
            browser.close()


def test_kernel_charts_on_the_pushs_variant(demo_url, tmp_path):
    with playwright()() as pw:
        browser, page = _open(pw, demo_url + "/kernel")
        try:
            page.get_by_role("heading", name="Roofline").wait_for(timeout=PAGE_TIMEOUT_MS)
            wait_idle(page)
            page.locator(".js-plotly-plot").nth(4).wait_for(timeout=PAGE_TIMEOUT_MS)
            page.screenshot(path=str(tmp_path / "kernel.png"), full_page=True)
            assert page.locator("[data-testid='stException']").count() == 0
            ranges = page.evaluate(
                "() => [...document.querySelectorAll('.js-plotly-plot')].map("
                "p => [p.layout.yaxis.title.text, p._fullLayout.yaxis.range])"
            )
            by_title = dict((t if isinstance(t, str) else t.get("text"), r) for t, r in ranges)
            assert by_title["shared memory per block (bytes)"][0] == 0  # constant 54,528 B, from zero
            traces = page.evaluate("() => [...document.querySelectorAll('.js-plotly-plot')].map(p => p.data.length)")
            assert min(traces[:3]) > 0  # no empty build chart
            assert page.evaluate(OVERLAPS_JS) == []
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        finally:
            browser.close()
