"""One connection per page render (app.data.store.render_reads): a cold render of a page that
runs many queries opens the history once, not once per query (each open of the 1M-result file
cost 0.1-0.5 s and its cached blocks were read again), and nothing is left open after the
render, so a writer in another process gets the file at once."""

from __future__ import annotations

import subprocess
import sys

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from app_history import build_history
from test_app_pages import ENTRYPOINT
from test_app_warm import connections  # noqa: F401 - the fixture that counts store.open_read

# A write in another process that does not wait for the lock: it fails while any connection of
# this process still holds the file.
WRITE_NOW = "import duckdb, sys; con = duckdb.connect(sys.argv[1]); con.execute('CHECKPOINT'); con.close()"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    work = tmp_path_factory.mktemp("render_reads")
    db = work / "history.duckdb"
    build_history(db, work / "bundles")
    return db


@pytest.fixture()
def opened(connections, monkeypatch, history):
    """The connections the dashboard's data layer opens from now on (test_app_warm's count), on
    empty caches."""
    monkeypatch.setenv("ATTNWATCH_DB", str(history))
    st.cache_data.clear()
    yield connections
    st.cache_data.clear()


@pytest.mark.parametrize("page", ["views/overview.py", "views/trends.py", "views/kernel.py", "views/compare.py"])
def test_a_cold_render_opens_the_history_once(opened, history, page):
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120).run()
    st.cache_data.clear()
    opened.clear()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [w.value for w in at.warning if "could not read" in w.value]
    assert len(opened) == 1, f"{page}: {len(opened)} connections for one render"
    # Nothing of the render is left open: another process writes at once.
    done = subprocess.run([sys.executable, "-c", WRITE_NOW, str(history)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
