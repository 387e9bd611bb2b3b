"""The dashboard's host filter (Overview, Trends) on a history where one GPU model ran on two
hosts: each host's latest run, sparklines and series are its own, never interleaved."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from bundle_factory import make_bundle
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import frame_with, open_page
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)
HOSTS = {"h200-a": 1.0, "h200-b": 1.05}  # host -> its constant latency offset


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    work = tmp_path_factory.mktemp("two_hosts")
    db = work / "history.duckdb"
    bundles = [
        make_bundle(
            work / f"{host}-{i}",
            run_id=f"{host}-{i}",
            hostname=host,
            latency_scale=scale,
            variants=("sdpa", "triton_fa2"),
            seed=10 * i + len(host) + int(scale * 100),
            commit_sha=f"{i:040x}",
            started_at=T0 + timedelta(hours=i, minutes=30 * (host == "h200-b")),
        )
        for i in range(4)
        for host, scale in HOSTS.items()
    ]
    ingest_paths(parse_location(db), bundles)
    return db


def _keys(at) -> list[str]:
    return [s.key for s in at.selectbox]


def test_overview_picks_a_host_and_shows_its_latest_run(two_hosts, monkeypatch):
    at = open_page(two_hosts, monkeypatch)
    summary = frame_with(at, "host")
    assert sorted(summary["host"]) == ["h200-a", "h200-b"]  # one row per host, not whichever ran last
    host = at.selectbox(key="overview_host")
    assert list(host.options) == ["h200-a", "h200-b"]
    host.select("h200-b").run()
    assert not at.exception
    assert any("h200-b-3" in m.value for m in at.markdown)  # the run caption names host b's newest run
    assert not any("h200-a-3" in m.value for m in at.markdown)
    assert at.query_params["host"] == "h200-b"  # remembered for the other pages, like the GPU


def test_trends_draws_one_series_per_host_or_only_the_chosen_host(two_hosts, monkeypatch):
    at = open_page(two_hosts, monkeypatch, "views/trends.py")
    assert list(at.selectbox(key="trends_host").options) == ["all hosts", "h200-a", "h200-b"]
    at.selectbox(key="trends_host").select("all hosts").run()
    plotted = frame_with(at, "p10")
    assert {s.rsplit(" · ", 1)[1] for s in plotted["series"]} == set(HOSTS)  # the host ends each series' name
    at.selectbox(key="trends_host").select("h200-a").run()
    plotted = frame_with(at, "p10")
    assert set(plotted["run_id"]) == {f"h200-a-{i}" for i in range(4)}
    assert not any(s.endswith("h200-a") for s in plotted["series"])


def test_a_single_host_history_shows_no_host_filter(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                tmp_path / f"r{i}", run_id=f"r{i}", seed=i, variants=("sdpa",), started_at=T0 + timedelta(hours=i)
            )
            for i in range(2)
        ],
    )
    assert "overview_host" not in _keys(open_page(db, monkeypatch))
    assert "trends_host" not in _keys(open_page(db, monkeypatch, "views/trends.py"))
