"""This push and Kernel on the shipped H200 sample, in a real headless Chromium at 1440x900.

This push names the newest push's cause as the PR comment does (the commit and its message, the
build report before → after, the counter rules' cause), calls the +11-15% change real though
its samples did not converge (its interval is decisive), and nothing of it is cut or off-screen.
Kernel opens on that variant, draws its spills, and keeps its roofline's decade labels apart; its
charts are SVG images the server draws, so it loads no chart library."""

from __future__ import annotations

import pytest

from browser_support import (
    CHROMIUM_ARGS,
    PAGE_TIMEOUT_MS,
    SVG_IMAGE,
    chromium,
    playwright,
    serve,
    svg_charts_js,
    wait_idle,
)
from demo_sample import PUSH_HEAD, build_demo_history
from test_browser_push import CUT_JS, VIEWPORT

pytestmark = pytest.mark.browser

# Each chart image of the Kernel page at the image's own scale: what it says it draws, and the
# boxes of its axes' labels.
KERNEL_CHARTS_JS = svg_charts_js(
    "({key: svg.dataset.key, title: svg.dataset.yTitle, xType: svg.dataset.xType, yType: svg.dataset.yType, "
    "yMin: Number(svg.dataset.yMin), points: svg.querySelectorAll('[data-role=point]').length, "
    "loaded: img.complete && img.naturalWidth > 0, svg: box(svg), "
    "xTicks: [...svg.querySelectorAll('[data-role=x-tick]')].map(box), "
    "yTicks: [...svg.querySelectorAll('[data-role=y-tick]')].map(box)})"
)


def _overlaps(boxes: list[dict]) -> list[tuple[int, int]]:
    """Pairs of labels whose boxes overlap by more than a pixel."""
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], i + 1)
        if a["left"] < b["right"] - 1
        and b["left"] < a["right"] - 1
        and a["top"] < b["bottom"] - 1
        and b["top"] < a["bottom"] - 1
    ]


@pytest.fixture(scope="module")
def demo_url(tmp_path_factory):
    chromium()
    playwright()
    work = tmp_path_factory.mktemp("browser_push_cause")
    db = build_demo_history(work / "history.duckdb", work)
    with serve(db, work / "dashboard.log") as url:
        yield url


def _open(pw, url, requests: list[str] | None = None):
    """A fresh browser on `url`; every URL it requests is added to `requests` when given."""
    browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
    page = browser.new_page(viewport=VIEWPORT)
    if requests is not None:
        page.on("request", lambda r: requests.append(r.url))
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
    requests: list[str] = []
    with playwright()() as pw:
        browser, page = _open(pw, demo_url + "/kernel", requests)
        try:
            page.get_by_role("heading", name="Roofline").wait_for(timeout=PAGE_TIMEOUT_MS)
            wait_idle(page)
            page.locator(SVG_IMAGE).nth(4).wait_for(timeout=PAGE_TIMEOUT_MS)  # 3 build charts, ncu, roofline
            page.wait_for_function(
                f'() => [...document.querySelectorAll("{SVG_IMAGE}")].every(i => i.complete && i.naturalWidth > 0)',
                timeout=PAGE_TIMEOUT_MS,
            )
            page.screenshot(path=str(tmp_path / "kernel.png"), full_page=True)
            assert page.locator("[data-testid='stException']").count() == 0
            charts = page.evaluate(KERNEL_CHARTS_JS)
            by_title = {c["title"]: c for c in charts}
            assert by_title["shared memory per block (bytes)"]["yMin"] == 0  # constant 54,528 B, from zero
            builds = [c for c in charts if c["key"] in ("build_chart", "spill_chart", "smem_chart")]
            assert len(builds) == 3 and min(c["points"] for c in builds) > 0  # no empty build chart
            (roofline,) = [c for c in charts if c["key"] == "roofline_chart"]
            assert (roofline["xType"], roofline["yType"]) == ("log", "log") and roofline["points"] > 0
            for axis in ("xTicks", "yTicks"):  # the decades' labels stay apart at the width shown
                assert len(roofline[axis]) >= 2 and _overlaps(roofline[axis]) == [], (axis, roofline[axis])
            # every chart is drawn whole inside its own picture
            for chart in charts:
                inside = chart["svg"]
                assert all(
                    inside["left"] - 0.5 <= t["left"] and t["right"] <= inside["right"] + 0.5 for t in chart["xTicks"]
                )
            # no chart drawn in the browser, and plotly's bundle (~2 s of a cold load) never fetched
            assert page.locator("[data-testid='stVegaLiteChart'], .js-plotly-plot").count() == 0
            assert not [r for r in requests if "PlotlyChart" in r], [r for r in requests if "Plotly" in r]
            assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        finally:
            browser.close()
