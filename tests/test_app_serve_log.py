"""The dashboard server's log: a cached function called outside a page's run (the preload, and
app.warm's thread computing the other pages' lists after the server listens) writes no
"No runtime found" line, and the cache module's other warnings still reach the log."""

from __future__ import annotations

import logging
import threading


def test_a_cached_call_outside_a_page_logs_no_runtime_line_but_other_warnings_pass():
    import streamlit as st

    from attnwatch.app import serve

    serve._quiet_cache_setup()
    serve._quiet_cache_setup()  # idempotent: one filter
    logger = logging.getLogger(serve._CACHE_LOGGER)
    assert sum(isinstance(f, serve._NoRuntimeFound) for f in logger.filters) == 1
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(level=logging.DEBUG)
    logger.addHandler(handler)
    try:

        @st.cache_data
        def cached_outside_a_page(x: int) -> int:
            return x + 1

        thread = threading.Thread(target=cached_outside_a_page, args=(1,))
        thread.start()
        thread.join()
        logger.warning("another warning of the cache module")
    finally:
        logger.removeHandler(handler)
    assert not [line for line in lines if "No runtime found" in line], lines
    assert "another warning of the cache module" in lines
