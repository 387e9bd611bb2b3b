"""`python -m attnwatch.app.serve run SCRIPT [options]`: Streamlit's command line, with the dashboard's
modules imported before the server starts listening.

Streamlit imports what a page needs when the first visitor's script runs, so the first page
view after a start paid for importing pandas, numpy, pyarrow, DuckDB, plotly and the app
(0.6-1.8 s on the 2-core CI machine, depending on its load) on top of its own queries.
Imported here, that cost moves to the server's start, where nobody is waiting for a page; the
modules are the same objects the scripts then import (sys.modules). The first page's data is
computed there too, before the server listens, and kept computed while it runs (app.warm).
`attnwatch dashboard` runs this instead of `python -m streamlit`. An exception before the server
starts is one line, its traceback saved, exit 70 (history.crash_log), as for every command.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from contextlib import contextmanager

from attnwatch.history.crash_log import EXIT_INTERNAL, describe, saved_where
from attnwatch.history.terminal_text import one_line

# Every module a page imports that is slow to import; the view scripts themselves are run by
# Streamlit on each visit and are not imported here.
PRELOAD = ("pandas", "numpy", "pyarrow", "duckdb", "plotly.graph_objects",
           *(f"attnwatch.app.{m}" for m in ("ui", "charts", "url_state", "data.alerts", "data.compare",
                                            "data.defaults", "data.kernel", "data.overview", "data.push",
                                            "data.quality", "data.runs", "data.sql_console", "data.store",
                                            "data.trends", "data.triage")),
           "attnwatch.history.links", "attnwatch.history.analysis.thresholds",
           # what Streamlit itself imports on a process's first page: the page icon (PIL), the
           # pages' icon names, DataFrames sent to the browser
           "PIL.Image", "PIL.PngImagePlugin", "streamlit.material_icon_names", "pyarrow.pandas_compat")
# Decorating or calling a cached function before Streamlit's runtime exists logs "No runtime found"
# once per function (its cache then lives in memory, as the runtime's does): not worth a line each.
_CACHE_LOGGER = "streamlit.runtime.caching.cache_data_api"
# Seconds the server's start waits for the first page's data before it listens anyway (a lake whose
# catalog is slow to answer, say): a visitor who comes before it is ready waits for the rest.
WARM_WAIT_S = 30.0


@contextmanager
def _quiet_cache_setup():
    import streamlit  # noqa: F401  (first: it configures its loggers, the level below must outlast that)

    logger = logging.getLogger(_CACHE_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def preload() -> None:
    with _quiet_cache_setup():
        for name in PRELOAD:
            importlib.import_module(name)
    # The first element a process draws asks whether Streamlit runs in a REPL, to print a
    # once-per-process hint (streamlit.delta_generator._maybe_print_use_warning): it walks the
    # stack and looks up every frame's module, 0.2-0.5 s on the 2-core CI machine for the first
    # visitor. Served by `streamlit run`, the answer is known: no hint.
    from streamlit import delta_generator

    if hasattr(delta_generator, "_use_warning_has_been_displayed"):  # tests/test_app_command.py notices a rename
        delta_generator._use_warning_has_been_displayed = True


def start_warming(wait_s: float = WARM_WAIT_S) -> threading.Event:
    """Start app.warm.keep_warm in a daemon thread and wait (at most `wait_s`) for its first
    warm-up; returns the event that stops the thread."""
    from attnwatch.app.warm import keep_warm

    stop, ready = threading.Event(), threading.Event()
    with _quiet_cache_setup():
        threading.Thread(target=keep_warm, args=(stop, ready), name="attnwatch-warm", daemon=True).start()
        ready.wait(wait_s)
    return stop


def main() -> None:
    try:
        preload()
        start_warming()
    except Exception as exc:  # noqa: BLE001 - a defect before the server starts: one line, as every command's
        history = os.environ.get("ATTNWATCH_DB", "")
        print(one_line(f"attnwatch dashboard: internal error while starting: {describe(exc)}"
                       f"{f' [history {history}]' if history else ''} ({saved_where(exc, 'dashboard')})"), file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *sys.argv[1:]]
    streamlit_main()


if __name__ == "__main__":
    main()
