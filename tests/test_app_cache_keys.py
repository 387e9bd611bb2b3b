"""The dashboard's cached functions take their arguments as cache keys without complaint: the
Trends figure's frame holds a list column (throttle_reasons, one numpy array per row), which
Streamlit's own frame hash refuses, so every Trends view logged "Streamlit's default hashing
method failed ... unhashable type: 'numpy.ndarray'" in the server's terminal (issue 44) and
pickled the frame instead. Real pages under AppTest on a history built from real bundles
(tests/app_history.py); the log is Streamlit's own hashing logger."""

from __future__ import annotations

import logging

from test_app_pages import open_page
from test_app_sql import history  # noqa: F401 - the module's history (tests/app_history.py), a fixture

HASHING_LOGGER = "streamlit.runtime.caching.hashing"


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def drawn(at) -> tuple:
    """The trend chart as sent: its spec and its datasets' bytes (Streamlit sends the data apart)."""
    (chart,) = at.get("vega_lite_chart")
    return chart.proto.spec, [d.data.data for d in chart.proto.datasets]


def test_a_trends_view_hashes_its_frames_without_a_warning(history, monkeypatch):
    kept = _Kept()
    logger = logging.getLogger(HASHING_LOGGER)
    logger.addHandler(kept)
    try:
        at = open_page(history, monkeypatch, "views/trends.py")
        first = drawn(at)
        causal = at.toggle(key="trends_causal")
        causal.set_value(not causal.value)
        second = drawn(at.run())  # another frame: another key, another chart
    finally:
        logger.removeHandler(kept)
    assert not at.exception and first != second
    assert [r.getMessage() for r in kept.records] == []
