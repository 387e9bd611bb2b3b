"""history.links, the dashboard's URL contract, and the group lifecycle of history.detection.alerts."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from app_history import build_push_history
from attnwatch.history.detection.alerts import (
    AlertError,
    acknowledge_many,
    alert_events,
    list_alerts,
    resolve,
    resolve_many,
)
from attnwatch.history.links import (
    PAGES,
    PARAMS,
    case_trend_query,
    commit_range,
    compare_query,
    parse_commit_range,
    relative,
    split_list,
    url,
)
from attnwatch.history.store.location import parse_location


def test_a_case_link_names_every_choice_of_its_trend():
    query = case_trend_query("NVIDIA H200", "triton_fa2/l4_mission/fp16/causal", commits=commit_range("ab12", "cd34"))
    assert query == {
        "gpu": "NVIDIA H200",
        "metric": "median_us",
        "variants": "triton_fa2",
        "shapes": "l4_mission",
        "dtype": "fp16",
        "causal": "1",
        "commits": "ab12..cd34",
    }
    assert case_trend_query("NVIDIA H200", "not-a-case-id") is None
    assert set(query) <= set(PARAMS)


def test_urls_are_encoded_and_readable():
    link = url(
        "https://perf.example.org/app/",
        "trends",
        {"gpu": "NVIDIA H100 80GB HBM3", "variants": "a,b", "commits": "ab..cd", "x": "(1) 'q'"},
    )
    parts = urlsplit(link)
    assert parts.path == "/app/trends" and "variants=a,b" in parts.query and "commits=ab..cd" in parts.query
    assert not any(ch in link for ch in " ()'\"")  # fit for a markdown link target
    assert parse_qs(parts.query)["gpu"] == ["NVIDIA H100 80GB HBM3"] and parse_qs(parts.query)["x"] == ["(1) 'q'"]
    assert (
        url("http://h", "push", {}) == "http://h/"
        and relative("compare", compare_query("G", base="a", head="b")) == "compare?gpu=G&base=a&head=b"
    )
    assert compare_query("G", base="a", head="b", commits="c..d") == {"gpu": "G", "commits": "c..d"}
    with pytest.raises(ValueError, match="unknown dashboard page"):
        url("http://h", "nope")
    assert {page.key for page in PAGES} >= {"push", "trends", "compare", "alerts", "run", "kernel", "overview"}


def test_commit_ranges_and_lists_parse_back():
    span = parse_commit_range(" ab12..cd34 ")
    assert (span.base, span.head) == ("ab12", "cd34")
    assert span.matches_base("ab12ffff") and span.matches_head("cd34") and not span.matches_head("cd3")
    assert (parse_commit_range("cd34").base, parse_commit_range("cd34").head) == (None, "cd34")
    assert parse_commit_range("") is None and parse_commit_range(None) is None
    assert split_list(" a, ,b,") == ["a", "b"] and split_list(None) == []


@pytest.fixture
def push_history(tmp_path):
    db = tmp_path / "history.duckdb"
    return db, build_push_history(db, tmp_path / "bundles")


def test_a_group_is_acknowledged_with_one_note_in_one_transaction(push_history):
    db, ids = push_history
    group = [a.alert_id for a in list_alerts(parse_location(db)) if a.commit_sha == ids["old_step_commit"]]
    changed = acknowledge_many(parse_location(db), group, "tile change in 03", "ana")
    assert [a.alert_id for a in changed] == group and {a.status for a in changed} == {"acknowledged"}
    assert all(alert_events(parse_location(db), i)[-1].note == "tile change in 03" for i in group)
    assert {a.status for a in resolve_many(parse_location(db), group, "fixed in 09", "ben")} == {"resolved"}


def test_a_group_with_one_refused_alert_changes_none(push_history):
    db, ids = push_history
    group = [a.alert_id for a in list_alerts(parse_location(db)) if a.commit_sha == ids["old_step_commit"]]
    resolve(parse_location(db), group[3], "fixed", "ben")
    with pytest.raises(AlertError, match=f"alert {group[3]}: cannot go from resolved to acknowledged"):
        acknowledge_many(parse_location(db), group, "all of them", "ana")
    after = {a.alert_id: a.status for a in list_alerts(parse_location(db))}
    assert [after[i] for i in group] == ["open"] * 3 + ["resolved"] + ["open"] * (len(group) - 4)
    assert all(len(alert_events(parse_location(db), i)) == 1 for i in group if i != group[3])  # no half-written events
    with pytest.raises(AlertError, match="no alert 999999"):
        acknowledge_many(parse_location(db), [group[0], 999999], "x", "ana")
    assert next(a for a in list_alerts(parse_location(db)) if a.alert_id == group[0]).status == "open"
    with pytest.raises(AlertError, match="none given"):
        resolve_many(parse_location(db), [], "x", "ana")
