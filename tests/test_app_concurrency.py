"""The dashboard and CI's ingest share one DuckDB file: neither may block the other for good,
and neither may lose what it writes. `attnwatch ingest` runs as a real separate process here."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from alert_form import fill
from app_history import REGRESSED_CASE, START, build_history
from bundle_factory import make_bundle
from attnwatch.history.detection.alerts import alert_events, list_alerts
from attnwatch.history.store.db import is_lock_error, open_read
from attnwatch.history.store.location import parse_location

ENTRYPOINT = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"
EXTRA_BUNDLES = 25
LOCK_WAIT_S = 120


def extra_bundles(work: Path) -> list[Path]:
    """Main runs newer than anything in the fixture history, for an ingest to add."""
    return [
        make_bundle(
            work / f"extra-{i:02d}",
            run_id=f"extra-{i:02d}",
            seed=1000 + i,
            started_at=START + timedelta(days=1, hours=i),
            commit_message=f"Later commit {i}",
        )
        for i in range(EXTRA_BUNDLES)
    ]


def start_ingest(db: Path, bundles: list[Path]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "attnwatch", "--db", str(db), "ingest", *map(str, bundles)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def writer_holds_lock(db: Path) -> bool:
    """True while another process holds the file: a read-only open fails with DuckDB's lock error."""
    try:
        duckdb.connect(str(db), read_only=True).close()
    except duckdb.IOException as exc:
        if is_lock_error(exc):
            return True
        raise
    return False


def wait_for_writer(db: Path, proc: subprocess.Popen) -> bool:
    """Poll until the ingest process holds the write lock (True) or has finished (False)."""
    give_up = time.monotonic() + LOCK_WAIT_S
    while proc.poll() is None and time.monotonic() < give_up:
        if writer_holds_lock(db):
            return True
        time.sleep(0.005)
    return False


def stored_run_ids(db: Path) -> set[str]:
    with open_read(parse_location(db)) as con:
        return {r[0] for r in con.execute("SELECT run_id FROM runs").fetchall()}


@pytest.fixture
def history(tmp_path):
    db = tmp_path / "history.duckdb"
    build_history(db, tmp_path / "bundles")
    return db, extra_bundles(tmp_path / "extra")


def test_ingest_in_another_process_succeeds_while_the_app_queries(history, monkeypatch):
    db, bundles = history
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    before = stored_run_ids(db)
    proc = start_ingest(db, bundles)
    renders_during_ingest = 0
    try:
        assert wait_for_writer(db, proc), "the ingest never took the write lock"
        while proc.poll() is None:
            at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120).run()
            assert not at.exception, [e.value for e in at.exception]
            renders_during_ingest += 1
        out, err = proc.communicate(timeout=LOCK_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert renders_during_ingest >= 1
    assert stored_run_ids(db) == before | {f"extra-{i:02d}" for i in range(EXTRA_BUNDLES)}
    # The next view shows the new newest main run: the cache is keyed by the file's signature.
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120).run()
    assert any(f"extra-{EXTRA_BUNDLES - 1:02d}" in m.value for m in at.markdown)


def test_acknowledge_during_an_ingest_waits_and_both_are_kept(history, monkeypatch):
    db, bundles = history
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    (alert,) = [a for a in list_alerts(parse_location(db)) if a.case_id == REGRESSED_CASE and a.metric == "median_us"]
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=180).run()
    at.switch_page("views/alerts.py").run()
    at.text_input(key="alerts_case").input(REGRESSED_CASE).run()  # the group of this case's alerts
    at.selectbox(key="alerts_alert").set_value(alert.alert_id).run()
    fill(at, "Looking at it while CI ingests")  # the alert drawn alone: no confirmation to wait for

    proc = start_ingest(db, bundles)
    try:
        assert wait_for_writer(db, proc), "the ingest never took the write lock"
        at.button(key="alerts_acknowledge").click().run()  # issued while the ingest holds the file
        out, err = proc.communicate(timeout=LOCK_WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not at.exception, [e.value for e in at.exception]
    assert proc.returncode == 0, err
    assert f"{EXTRA_BUNDLES} run(s) inserted" in out
    assert {f"extra-{i:02d}" for i in range(EXTRA_BUNDLES)} <= stored_run_ids(db)
    stored = next(a for a in list_alerts(parse_location(db)) if a.alert_id == alert.alert_id)
    assert (stored.status, stored.note, stored.actor) == (
        "acknowledged",
        "Looking at it while CI ingests",
        "kernel-dev",
    )
    assert [e.action for e in alert_events(parse_location(db), alert.alert_id)] == ["opened", "acknowledged"]
