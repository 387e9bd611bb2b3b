"""The default branch is a setting of the history (history.store.settings), not the word "main": a
repository whose default branch is `master` gets its series, alerts and pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app_history import H200, PUSH_REGRESSED_VARIANT, push_bundles
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.store.settings import SettingError, default_branch, set_default_branch
from test_app_pages import open_page
from attnwatch.history.store.location import parse_location

REPO = Path(__file__).resolve().parent.parent


def cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def master_history(tmp_path_factory):
    """The two-GPU push history with every run on `master`, ingested and scanned by the CLI the
    way the GPU workflow does it (`--default-branch` from the event's repository)."""
    work = tmp_path_factory.mktemp("master_history")
    db = work / "history.duckdb"
    bundles = push_bundles(work / "bundles", branch="master")
    ingested = cli(db, "ingest", "--default-branch", "master", *map(str, bundles))
    assert ingested.returncode == 0, ingested.stderr
    detected = cli(db, "detect")
    assert detected.returncode == 0, detected.stderr
    return db, detected.stdout


def test_detect_finds_the_steps_of_a_master_history(master_history):
    db, output = master_history
    with open_read(parse_location(db)) as con:
        assert default_branch(con) == "master"
        kinds = dict(con.execute("SELECT kind, count(*) FROM alerts GROUP BY 1").fetchall())
        series = con.execute("SELECT count(DISTINCT case_id) FROM case_series").fetchone()[0]
        latest = con.execute("SELECT count(*) FROM latest_main_runs").fetchone()[0]
    assert kinds.get("regression", 0) >= 4 and kinds.get("correctness", 0) == 1, (kinds, output)
    assert series == 16 and latest == 2


def test_every_first_page_shows_a_master_history(master_history, monkeypatch):
    db, _ = master_history
    push = open_page(db, monkeypatch, "views/push.py")
    headings = [h.value for h in push.subheader]
    assert any(h.startswith("Regressions (") and h != "Regressions (0)" for h in headings), headings
    overview = open_page(db, monkeypatch, "views/overview.py")
    assert any(len(d.value) == 16 for d in overview.dataframe)  # the newest master run's cases
    trends = open_page(db, monkeypatch, "views/trends.py", gpu=H200, variants=PUSH_REGRESSED_VARIANT)
    assert trends.get("vega_lite_chart"), "Trends drew no chart for the master series"
    assert trends.selectbox(key="trends_branch").value == "master"


def test_the_setting_is_read_and_written_in_one_place(tmp_path):
    db = tmp_path / "h.duckdb"
    shown = cli(db, "history", "default-branch", "trunk")
    assert shown.returncode == 0 and "default branch: trunk" in shown.stdout, shown.stderr
    assert cli(db, "history", "default-branch").stdout.strip() == "trunk"
    bad = cli(db, "history", "default-branch", "two..dots")
    assert bad.returncode == 2 and "not a git branch name" in bad.stderr and "Traceback" not in bad.stderr
    with open_write(parse_location(db)) as con:
        assert set_default_branch(con, "trunk", "h") is False
        with pytest.raises(SettingError):
            set_default_branch(con, "-x", "h")
        assert default_branch(con) == "trunk"
