"""The pages' history-wide queries, rewritten to read less of the results table (issue 44's page
times), answer what the plain query over the whole table answers: the Overview's device summary
as the `run_summaries` view counts, the Trends pickers' lists as one DISTINCT query each."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
import streamlit as st

from app_history import build_history
from attnwatch.app.data import overview, trends
from attnwatch.app.data.store import current_source
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    work = tmp_path_factory.mktemp("page_queries")
    db = work / "history.duckdb"
    build_history(db, work)
    con = duckdb.connect(str(db))
    # A latest main run with no results at all: counted 0 everywhere, not left out.
    con.execute(
        "INSERT INTO runs SELECT * REPLACE ('empty-run' AS run_id, started_at + INTERVAL 1 DAY AS started_at) "
        "FROM runs WHERE run_id = (SELECT run_id FROM latest_main_runs ORDER BY series_gpu LIMIT 1)"
    )
    con.close()
    return db


@pytest.fixture()
def source(history, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_DB", str(history))
    st.cache_data.clear()
    yield current_source()
    st.cache_data.clear()


def test_the_device_summary_counts_as_run_summaries_does(source, history):
    summary = overview.gpu_summary(source)
    with duckdb.connect(str(history), read_only=True) as con:
        expected = con.execute(
            "SELECT l.run_id, s.cases, s.cases_ok, s.cases_failed, s.cases_crashed, s.cases_skipped "
            "FROM latest_main_runs l JOIN run_summaries s USING (run_id) ORDER BY l.series_gpu, l.series_pool"
        ).df()
    assert "empty-run" in set(summary["run_id"])
    counts = ["run_id", "cases", "cases_ok", "cases_failed", "cases_crashed", "cases_skipped"]
    pd.testing.assert_frame_equal(summary[counts], expected, check_dtype=False)
    assert summary.loc[summary["run_id"] == "empty-run", "cases"].item() == 0
    assert summary["cases"].sum() > 0


def test_the_trend_pickers_lists_are_each_one_distinct_query(source, history):
    options = trends.trend_options(source)
    with duckdb.connect(str(history), read_only=True) as con:

        def distinct(sql: str) -> list:
            return [row[0] for row in con.execute(sql).fetchall()]

        expected = {
            "gpus": distinct("SELECT series_gpu FROM series_runs GROUP BY 1 ORDER BY count(*) DESC"),
            "branches": distinct(
                f"SELECT branch FROM series_runs WHERE branch IS NOT NULL GROUP BY 1 "
                f"ORDER BY (branch = {DEFAULT_BRANCH_SQL}) DESC, count(*) DESC LIMIT 200"
            ),
            "variants": distinct("SELECT DISTINCT variant FROM results ORDER BY 1"),
            "shapes": distinct(
                "SELECT shape_id FROM results WHERE shape_id IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1"
            ),
            "dtypes": distinct("SELECT DISTINCT dtype FROM results WHERE dtype IS NOT NULL ORDER BY 1"),
        }
    assert options == expected
    assert len(options["variants"]) > 1 and len(options["shapes"]) > 1
