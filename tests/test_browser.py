"""The dashboard in a real headless Chromium: `attnwatch dashboard` serves a fixture history on
a free loopback port, Playwright visits every page, waits for the plotly charts to draw and
saves a screenshot of each (under the test's tmp dir, and under $ATTNWATCH_SCREENSHOTS when set).

Chromium is the system's (Debian's package), driven through `executable_path`; nothing is
downloaded. Without it the test skips locally but fails when $CI is set, so CI cannot pass by
silently skipping.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from app_history import HOSTILE_MESSAGE, add_real_ncu_run, build_history, main_run_id

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90
PAGE_TIMEOUT_MS = 60_000
PLOTLY = ".js-plotly-plot .main-svg"
TABLE = "[data-testid='stDataFrame']"
# (url path, title, what shows the page has drawn with this history)
PAGES = (
    ("", "Overview", TABLE),
    ("trends", "Trends", PLOTLY),
    ("compare", "Compare", TABLE),
    ("alerts", "Alerts", TABLE),
    ("kernel?variant=sdpa", "Kernel", PLOTLY),
    ("sql", "SQL", "textarea"),
    (f"run?run={main_run_id(6)}", "Run", TABLE),
)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium not found on PATH (install Debian's chromium: make browser)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must not skip the browser test")
        pytest.skip(message)
    return path


def _playwright():
    """Playwright's sync API (the python package, in the dev extra); same skip/fail rule as chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        message = "python package playwright not installed (pip install -e '.[dev]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
    """Poll Streamlit's health endpoint until it answers "ok", the process dies, or time runs out."""
    give_up = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                if response.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"dashboard not healthy after {SERVER_START_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def dashboard_url(tmp_path_factory, fixtures_dir):
    """`attnwatch dashboard` over a fixture history, as a subprocess in its own process group,
    always terminated at the end."""
    work = tmp_path_factory.mktemp("browser_history")
    db = work / "history.duckdb"
    build_history(db, work / "bundles")
    add_real_ncu_run(db, work / "bundles", fixtures_dir)
    port = _free_port()
    log = work / "dashboard.log"
    env = dict(os.environ, ATTNWATCH_DB=str(db))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ci.cli", "--db", str(db), "dashboard", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        _wait_healthy(proc, port, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def _wait_idle(page) -> None:
    """Until Streamlit's "running" indicator is gone and no element is still a loading skeleton."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]')",
        timeout=PAGE_TIMEOUT_MS,
    )


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
    path = _chromium()
    _playwright()
    return path


def test_every_page_draws_in_chromium(chromium_path, dashboard_url, tmp_path):
    executable = chromium_path
    sync_playwright = _playwright()
    dialogs: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 2600})
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
                assert "could not read" not in page.locator("[data-testid='stMain']").inner_text(), f"{title}: a read failed"
                assert (tmp_path / name).stat().st_size > 10_000

            # Clicking a point of the trend opens that point's run.
            page.goto(f"{dashboard_url}/trends", wait_until="domcontentloaded")
            point = page.locator(".js-plotly-plot .scatterlayer .trace .points path").last
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
            browser.close()
    assert dialogs == [], f"a commit message ran script: {dialogs}"
