"""The dashboard on a lake: every page renders the team history (tests/app_history.py, copied
into a lake on the session's PostgreSQL server) as it renders the file, and sees a new commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnwatch.app.data.store import current_source
from alert_form import fill
from app_history import CRASHED_CASE, build_history
from bundle_factory import make_bundle
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.store.copy import copy_history
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location
from attnwatch.history.links import PAGES as DECLARED_PAGES

ENTRYPOINT = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"
PAGES = tuple(page.script for page in DECLARED_PAGES)  # every page's view, in the navigation's order


@pytest.fixture
def team_lake(lake_db, tmp_path):
    file = tmp_path / "team.duckdb"
    build_history(file, tmp_path / "bundles")
    copy_history(parse_location(file), parse_location(lake_db))
    return lake_db


def _render(page: str) -> AppTest:
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=180)
    at.run()  # the first page (This push)
    if page != PAGES[0]:
        at.switch_page(page).run()
    return at


def test_every_page_renders_a_lake(team_lake):
    for page in PAGES:
        at = _render(page)
        assert not at.exception, (page, [e.value for e in at.exception])
        assert not [w.value for w in at.warning if "could not read" in w.value], page
    overview = _render("views/overview.py")
    cases = next(d.value for d in overview.dataframe if "trend_us" in d.value.columns)
    assert len(cases) == 16 and (cases.set_index("case_id").loc[CRASHED_CASE, "status"] == "crashed")


def test_a_commit_to_the_lake_changes_the_dashboards_cache_key(team_lake, tmp_path):
    before = current_source()
    assert before.exists and before.path == team_lake
    assert current_source() == before  # nothing committed: the cached results stay valid
    ingest_paths(parse_location(team_lake), [make_bundle(tmp_path / "new", run_id="new-run", n_samples=5)])
    assert current_source() != before


def test_the_read_only_role_is_told_so_on_the_alerts_page(team_lake, postgres_server, monkeypatch):
    """README's dashboard role: Acknowledge answers with one plain message, no traceback, and
    nothing is written."""
    dbname = parse_location(team_lake).catalog.split()[0].split("=")[1]
    role = f"dash_{dbname}"
    postgres_server.psql(f"CREATE ROLE {role} LOGIN")
    postgres_server.psql(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}", dbname)
    monkeypatch.setenv("ATTNWATCH_DB", team_lake.replace("user=attnwatch", f"user={role}"))
    at = _render("views/alerts.py")
    fill(at, "looking at it")
    at.button(key="alerts_acknowledge").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value.replace("\\", "") for e in at.error]  # shown as escaped Markdown
    assert any("this history is read-only for you" in e and "Not changed" in e for e in errors), errors
    assert all(len(e) <= 400 and "Traceback" not in e and "INSERT INTO" not in e for e in errors), errors
    assert all(a.status == "open" for a in list_alerts(parse_location(team_lake)))
