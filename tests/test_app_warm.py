"""The first page's data computed before its first visitor (app.warm): a page drawn after the
warm-up reads nothing from the history, and a history changed after it is never shown stale."""

from __future__ import annotations

import re
import threading
import time
from datetime import timedelta

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import attnwatch.app.data.store as store
import attnwatch.app.warm as warm
from attnwatch.app.data import defaults, kernel, overview, trends
from app_history import H200, START
from bundle_factory import make_bundle
from attnwatch.history.store.db import schema_version
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.migrations import code_schema_version
from old_history import history_at_version
from test_app_pages import ENTRYPOINT
from attnwatch.history.store.location import parse_location


def _bundle(work, i: int, scale=None):
    return make_bundle(
        work / f"h200-{i}",
        run_id=f"h200-{i}",
        variants=("sdpa", "triton_fa2"),
        gpu_name=H200,
        commit_sha=f"{i:02d}" + "ab" * 19,
        started_at=START + timedelta(hours=i),
        variant_scale=scale,
        seed=i,
    )


@pytest.fixture()
def history(tmp_path, monkeypatch):
    """Two main runs on one GPU, the server's caches empty, ATTNWATCH_DB naming the history."""
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [_bundle(tmp_path, 0), _bundle(tmp_path, 1)])
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    st.cache_data.clear()
    st.cache_resource.clear()
    yield db
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture()
def connections(monkeypatch):
    """How many connections the dashboard opens on the history from now on."""
    opened = []
    real = store.open_read

    def counting(*args, **kwargs):
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "open_read", counting)
    return opened


def first_page() -> AppTest:
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [w.value for w in at.warning if "could not read" in w.value]
    return at


def summary(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith(f"**{H200}"))


def test_after_the_warm_up_the_first_page_reads_nothing_from_the_history(history, connections):
    warm.warm()
    warmed = len(connections)
    at = first_page()
    assert warmed > 0 and len(connections) == warmed  # every query the page makes was answered by the cache
    assert "run `h200-1`" in summary(at) and "vs run `h200-0`" in summary(at)


def test_without_the_warm_up_the_first_page_reads_the_history(history, connections):
    first_page()  # the test above can fail: a cold page does open the history
    assert connections


def test_what_the_other_pages_open_with_is_computed_after_the_first_page(history, connections):
    source = warm.warm()
    warm.warm_shared(source)
    warmed = len(connections)
    defaults.focus(source)
    defaults.measured_on(source, H200)
    trends.trend_options(source)
    overview.gpu_summary(source)
    kernel.variants_with_data(source)
    assert len(connections) == warmed  # every one answered by the cache


def test_keep_warm_computes_the_other_pages_lists_once_the_first_page_is_ready(history, monkeypatch):
    order = []
    monkeypatch.setattr(warm, "warm_shared", lambda source: order.append(("shared", ready.is_set())))
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=warm.keep_warm, args=(stop, ready, 0.05), daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        deadline = time.monotonic() + 60
        while not order and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert order[:1] == [("shared", True)]  # after the first page's data, not holding up the server's start


def test_a_run_ingested_after_the_warm_up_shows_at_once(history, tmp_path):
    warm.warm()
    ingest_paths(parse_location(history), [_bundle(tmp_path, 2, scale={"triton_fa2": 1.12})])
    line = summary(first_page())
    assert "run `h200-2`" in line and "vs run `h200-1`" in line
    assert int(re.search(r"(\d+) regression\(s\)", line).group(1)) > 0  # the new pair judged, not the warmed one


def test_keep_warm_warms_each_new_version_once_it_has_held(history, tmp_path, monkeypatch, connections):
    warmed = []
    real = warm.warm

    def recording():
        warmed.append(real())
        return warmed[-1]

    monkeypatch.setattr(warm, "warm", recording)
    stop, ready = threading.Event(), threading.Event()
    thread = threading.Thread(target=warm.keep_warm, args=(stop, ready, 0.05), daemon=True)
    thread.start()
    try:
        assert ready.wait(60)
        time.sleep(0.5)  # ten looks at an unchanged history
        assert len(warmed) == 1
        ingest_paths(parse_location(history), [_bundle(tmp_path, 2)])
        changed = store.current_source()
        deadline = time.monotonic() + 60
        while changed not in warmed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert warmed[-1] == changed  # (an ingest's steps that each held for an interval are warmed too)
    finally:
        stop.set()
        thread.join(60)
    before = len(connections)
    assert "run `h200-2`" in summary(first_page())
    assert len(connections) == before


def test_an_older_history_is_left_for_the_first_page_view_to_bring_up_to_date_and_say_so(tmp_path, monkeypatch):
    db = history_at_version(tmp_path / "old.duckdb", 2, tmp_path)
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    st.cache_data.clear()
    st.cache_resource.clear()
    warm.warm()
    assert schema_version(parse_location(db)) == (2, code_schema_version())  # the warm-up wrote nothing
    at = first_page()
    assert any(f"was brought up to schema {code_schema_version()} on opening" in c.value for c in at.caption)
    st.cache_resource.clear()
