"""`python -m app.serve run SCRIPT [options]`: Streamlit's command line, with the dashboard's
modules imported before the server starts listening.

Streamlit imports what a page needs when the first visitor's script runs, so the first page
view after a start paid for importing pandas, numpy, pyarrow, DuckDB, plotly and the app
(0.6-1.8 s on the 2-core CI machine, depending on its load) on top of its own queries.
Imported here, that cost moves to the server's start, where nobody is waiting for a page; the
modules are the same objects the scripts then import (sys.modules). `attnwatch dashboard` runs
this instead of `python -m streamlit`.
"""

from __future__ import annotations

import importlib
import logging
import sys

# Every module a page imports that is slow to import; the view scripts themselves are run by
# Streamlit on each visit and are not imported here.
PRELOAD = ("pandas", "numpy", "pyarrow", "duckdb", "plotly.graph_objects", "attnwatch.app.ui", "attnwatch.app.charts", "attnwatch.app.url_state",
           "attnwatch.app.data.alerts", "attnwatch.app.data.compare", "attnwatch.app.data.defaults", "attnwatch.app.data.kernel", "attnwatch.app.data.overview",
           "attnwatch.app.data.push", "attnwatch.app.data.quality", "attnwatch.app.data.runs", "attnwatch.app.data.sql_console", "attnwatch.app.data.store",
           "attnwatch.app.data.trends", "attnwatch.app.data.triage", "attnwatch.history.links", "attnwatch.history.analysis.thresholds")
# Decorating a cached function before Streamlit's runtime exists logs a warning per function
# (the cache itself is made at the first call, inside the runtime): not worth a log line each.
_CACHE_LOGGER = "streamlit.runtime.caching.cache_data_api"


def preload() -> None:
    import streamlit  # noqa: F401  (first: it configures its loggers, the level below must outlast that)

    logger = logging.getLogger(_CACHE_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        for name in PRELOAD:
            importlib.import_module(name)
    finally:
        logger.setLevel(level)


def main() -> None:
    preload()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *sys.argv[1:]]
    streamlit_main()


if __name__ == "__main__":
    main()
