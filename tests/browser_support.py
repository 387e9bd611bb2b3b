"""What the browser tests share: Debian's Chromium driven by Playwright through `executable_path`
(nothing downloaded), and `attnwatch dashboard` serving a history on a free loopback port.

Without Chromium or Playwright a browser test skips locally but fails when $CI is set, so CI
cannot pass by silently skipping.
"""

from __future__ import annotations

import contextlib
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

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90
PAGE_TIMEOUT_MS = 60_000


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        message = "chromium not found on PATH (install Debian's chromium: make browser)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must not skip the browser test")
        pytest.skip(message)
    return path


def playwright():
    """Playwright's sync API (the python package, in the dev extra); same skip/fail rule as chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        message = "python package playwright not installed (pip install -e '.[dev]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return sync_playwright


class ProfileBrowser:
    """Chromium with an on-disk profile, used as Playwright's `Browser` is (`new_page(viewport=...)`,
    `close()`). Pages of one test file share the profile as a returning user's tabs do: from the
    third load on the browser runs Streamlit's frontend from its code cache instead of compiling it
    again, which Playwright's default off-the-record contexts never do (docs/benchmarks/dashboard.md,
    "Page loads in Chromium"). Each page still opens its own websocket, so its own Streamlit session."""

    def __init__(self, pw, executable: str, profile: Path):
        """`profile`: a folder of the test file's temp space."""
        self._context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=executable, args=CHROMIUM_ARGS, headless=True
        )

    def new_page(self, viewport: dict | None = None):
        page = self._context.new_page()
        if viewport:
            page.set_viewport_size(viewport)
        return page

    def close(self) -> None:
        self._context.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, port: int, log: Path) -> None:
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
    raise AssertionError(
        f"dashboard not healthy after {SERVER_START_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


@contextlib.contextmanager
def serve(db: Path, log: Path):
    """`attnwatch dashboard` over `db` as a subprocess in its own process group; yields its URL and
    always terminates it."""
    port = free_port()
    env = dict(os.environ, ATTNWATCH_DB=str(db))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", str(db), "dashboard", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        wait_healthy(proc, port, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def wait_idle(page) -> None:
    """Until Streamlit's "running" indicator is gone and no element is still a loading skeleton."""
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]')",
        timeout=PAGE_TIMEOUT_MS,
    )


SVG_IMAGE = "img[src^='data:image/svg+xml']"  # a chart the server draws as an SVG image (app/svg_parts.py)


def svg_charts_js(measure: str) -> str:
    """A page function returning, for each SVG chart image on the page, the JavaScript expression
    `measure` evaluated with `svg` (the image's SVG drawn once more in a test-only node at the
    image's own width, so that its parts can be measured as the image shows them), `img` and
    `box` (an element's client rectangle as a plain object)."""
    return f"""() => [...document.querySelectorAll("{SVG_IMAGE}")].map(img => {{
  const holder = document.createElement('div');
  holder.innerHTML = new TextDecoder().decode(Uint8Array.from(atob(img.src.split(',')[1]), c => c.charCodeAt(0)));
  document.body.appendChild(holder);
  const svg = holder.querySelector('svg');
  svg.setAttribute('width', img.getBoundingClientRect().width);
  svg.removeAttribute('height');
  const box = e => {{ const b = e.getBoundingClientRect(); return {{left: b.left, right: b.right, top: b.top, bottom: b.bottom}}; }};
  const out = {measure};
  holder.remove();
  return out; }})"""
