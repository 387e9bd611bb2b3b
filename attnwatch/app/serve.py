"""`python -m attnwatch.app.serve run SCRIPT [options]`: Streamlit's command line, with the dashboard's
modules imported before the server starts listening.

Streamlit imports what a page needs when the first visitor's script runs, so the first page
view after a start paid for importing pandas, numpy, pyarrow, DuckDB and the app
(0.6-1.8 s on the 2-core CI machine, depending on its load) on top of its own queries.
Imported here, that cost moves to the server's start, where nobody is waiting for a page; the
modules are the same objects the scripts then import (sys.modules). The first page's data is
computed there too, before the server listens, and kept computed while it runs (app.warm).
`attnwatch dashboard` runs this instead of `python -m streamlit`. An exception before the server
starts is one line, its traceback saved, exit 70 (history.crash_log), as for every command.

A page opened by its URL (`/trends`, a link from a PR comment) logged two 404s in the browser's
console: Streamlit's client does not know where the app's root is, tries the page's own path as
the root first (`/trends/_stcore/health`, `/trends/_stcore/host-config`, which the server
refuses) and only then the path above it (streamlit/streamlit#7074). The client reads its root
from `window.__streamlit.BACKEND_BASE_URL` when the page sets one, and then tries that alone; so
the index.html served here sets it to the folder the page's own scripts load from (`./static/…`
resolves there, and the app's pages are one path segment deep). Served under a configured
server.baseUrlPath the page is left as Streamlit ships it.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

from attnwatch.history.crash_log import EXIT_INTERNAL, describe, saved_where
from attnwatch.history.temp_dirs import owned_temp_dir
from attnwatch.history.terminal_text import one_line

# Every module a page imports that is slow to import; the view scripts themselves are run by
# Streamlit on each visit and are not imported here.
PRELOAD = (
    "pandas",
    "numpy",
    "pyarrow",
    "duckdb",
    *(
        f"attnwatch.app.{m}"
        for m in (
            "ui",
            "charts",
            "trend_chart",
            "url_state",
            "data.alerts",
            "data.compare",
            "data.defaults",
            "data.kernel",
            "data.overview",
            "data.push",
            "data.quality",
            "data.runs",
            "data.sql_console",
            "data.store",
            "data.trends",
            "data.triage",
        )
    ),
    "attnwatch.history.links",
    "attnwatch.history.analysis.thresholds",
    # what Streamlit itself imports on a process's first page: the page icon (PIL), the
    # pages' icon names, DataFrames sent to the browser
    "PIL.Image",
    "PIL.PngImagePlugin",
    "streamlit.material_icon_names",
    "pyarrow.pandas_compat",
)
# Decorating or calling a cached function before Streamlit's runtime exists logs "No runtime found"
# once per function (its cache then lives in memory, as the runtime's does): not worth a line each.
_CACHE_LOGGER = "streamlit.runtime.caching.cache_data_api"
# Seconds the server's start waits for the first page's data before it listens anyway (a lake whose
# catalog is slow to answer, say): a visitor who comes before it is ready waits for the rest.
WARM_WAIT_S = 30.0
# Set before Streamlit's own script runs: the app's root, as the page's assets resolve it (module docstring).
ROOT_SCRIPT = (
    "<script>window.__streamlit = Object.assign("
    '{BACKEND_BASE_URL: new URL(".", document.baseURI).href}, window.__streamlit)</script>'
)


class _NoRuntimeFound(logging.Filter):
    """Drops the cache module's "No runtime found" lines and nothing else it logs."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No runtime found" not in record.getMessage()


def _quiet_cache_setup() -> None:
    """Filter _CACHE_LOGGER's "No runtime found" lines for the whole process: the preload and the
    warm-up thread (app.warm.keep_warm, which computes the other pages' lists after the server
    listens and again after an ingest) call cached functions outside a page's run. A filter, not
    a level, so that the cache's other warnings still reach the log, whatever thread logs them."""
    import streamlit  # noqa: F401  (first: it configures its loggers)

    logger = logging.getLogger(_CACHE_LOGGER)
    if not any(isinstance(f, _NoRuntimeFound) for f in logger.filters):
        logger.addFilter(_NoRuntimeFound())


def preload() -> None:
    _quiet_cache_setup()
    for name in PRELOAD:
        importlib.import_module(name)
    # The first element a process draws asks whether Streamlit runs in a REPL, to print a
    # once-per-process hint (streamlit.delta_generator._maybe_print_use_warning): it walks the
    # stack and looks up every frame's module, 0.2-0.5 s on the 2-core CI machine for the first
    # visitor. Served by `streamlit run`, the answer is known: no hint.
    from streamlit import delta_generator

    if hasattr(delta_generator, "_use_warning_has_been_displayed"):  # tests/test_app_command.py notices a rename
        delta_generator._use_warning_has_been_displayed = True


def static_dir_naming_the_root(shipped: Path, target: Path) -> Path:
    """`target` made a copy of Streamlit's static folder `shipped` (links to its files) whose
    index.html runs ROOT_SCRIPT first in its head."""
    for entry in shipped.iterdir():
        if entry.name != "index.html":
            (target / entry.name).symlink_to(entry)
    html = (shipped / "index.html").read_text(encoding="utf-8")
    if "<head>" not in html:
        raise RuntimeError(f"{shipped / 'index.html'} has no <head> to name the app's root in")
    (target / "index.html").write_text(html.replace("<head>", "<head>\n    " + ROOT_SCRIPT, 1), encoding="utf-8")
    return target


def serve_index_naming_the_root() -> None:
    """Have Streamlit's server read its static files from a static_dir_naming_the_root copy,
    removed when the process ends; under a configured server.baseUrlPath, from its own."""
    from streamlit import config, file_util

    shipped = file_util.get_static_dir
    target = owned_temp_dir("attnwatch-static-")  # a killed server's copy: swept by the next start
    atexit.register(shutil.rmtree, target, ignore_errors=True)
    static_dir_naming_the_root(Path(shipped()), target)

    def static_dir() -> str:  # asked when the server builds its routes, after the options are read
        return shipped() if str(config.get_option("server.baseUrlPath") or "").strip("/") else str(target)

    file_util.get_static_dir = static_dir


def start_warming(wait_s: float = WARM_WAIT_S) -> threading.Event:
    """Start app.warm.keep_warm in a daemon thread and wait (at most `wait_s`) for its first
    warm-up; returns the event that stops the thread."""
    from attnwatch.app.warm import keep_warm

    stop, ready = threading.Event(), threading.Event()
    _quiet_cache_setup()
    threading.Thread(target=keep_warm, args=(stop, ready), name="attnwatch-warm", daemon=True).start()
    ready.wait(wait_s)
    return stop


def main() -> None:
    try:
        preload()
        serve_index_naming_the_root()
        start_warming()
    except Exception as exc:  # noqa: BLE001 - a defect before the server starts: one line, as every command's
        history = os.environ.get("ATTNWATCH_DB", "")
        print(
            one_line(
                f"attnwatch dashboard: internal error while starting: {describe(exc)}"
                f"{f' [history {history}]' if history else ''} ({saved_where(exc, 'dashboard')})"
            ),
            file=sys.stderr,
        )
        sys.exit(EXIT_INTERNAL)
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *sys.argv[1:]]
    streamlit_main()


if __name__ == "__main__":
    main()
