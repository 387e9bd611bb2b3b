"""A figure measured under a power or thermal cap is marked where a kernel engineer reads it: the
dashboard's trend (a badge and the quality mark) and the PR comment's row; the recipe a result
was taken with is shown beside it (history.analysis.caps, app.data.quality, ci.integration.comment.render)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bundle_factory import case_id, make_bundle
from compare_factory import make_report
from attnwatch.app.trend_chart import trend_spec
from attnwatch.app.data import trends
from attnwatch.app.data.quality import marks
from attnwatch.app.data.store import current_source
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import load_report, write_report
from attnwatch.history.analysis.caps import cap_mark
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

CAPPED = case_id("triton_fa2", "l4_mission", "fp16", True)
CLEAN = case_id("sdpa", "l4_mission", "fp16", True)


def test_capping_reasons_name_their_cap_and_the_others_none():
    assert cap_mark(["gpu_idle", "sw_power_cap"]) == "power cap"
    assert cap_mark(["hw_thermal_slowdown"]) == "thermal"
    assert cap_mark(["gpu_idle", "applications_clocks_setting", "sync_boost"]) is None
    assert cap_mark(None) is None and cap_mark(float("nan")) is None and cap_mark("sw_power_cap") is None


@pytest.fixture()
def capped_history(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    overrides = {
        CAPPED: {
            "throttle_reasons": ["sw_power_cap"],
            "throttled_samples": 40,
            "timing_recipe": "band",
            "band_discarded_samples": 12,
            "clock_normalised_median_us": 3.25,
            "sm_clock_median_mhz": 1980.0,
            "reference_clock_mhz": 1980.0,
        },
        CLEAN: {"timing_recipe": "plain"},
    }
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                tmp_path / "b",
                run_id="capped-run",
                variants=("sdpa", "triton_fa2"),
                causal=(True,),
                timing_overrides=overrides,
            )
        ],
    )
    return current_source(str(db))


def test_the_trend_badges_a_capped_point_and_shows_its_recipe(capped_history):
    label = next(label for label, m in trends.METRICS.items() if m.column == "median_us")
    frame = trends.trend_series(
        capped_history, label, "NVIDIA H200", "main", ("sdpa", "triton_fa2"), ("l4_mission",), "fp16", True
    )
    frame = frame.assign(marks=marks(frame))
    by_case = frame.set_index("case_id")
    assert by_case.loc[CAPPED, "marks"].startswith("throttled: power cap (40 of ")
    assert by_case.loc[CLEAN, "marks"] == ""
    spec = trend_spec(frame, label)
    marks_drawn = spec["datasets"]["marks"]
    badge = marks_drawn[marks_drawn["kind"] == "under a power/thermal cap"]
    assert list(badge["label"]) == ["measured under power cap"]  # only the capped point
    notes = list(spec["datasets"]["points"]["notes"])
    assert any(
        "recipe band: 12 samples off the modal clock discarded" in n and "clock-normalised 3.25 µs" in n for n in notes
    )
    assert "" in notes  # the plain recipe adds nothing


def test_the_run_page_names_the_recipe_and_the_normalised_figure_apart_from_the_latency(capped_history, monkeypatch):
    from test_app_pages import frame_with, open_page

    at = open_page(Path(capped_history.path), monkeypatch, "views/run.py", run="capped-run")
    table = frame_with(at, "case_id").set_index("case_id")
    assert table.loc[CAPPED, "recipe"] == (
        "recipe band: 12 samples off the modal clock discarded; clock-normalised 3.25 µs"
    )
    assert table.loc[CAPPED, "marks"].startswith("throttled: power cap")
    assert table.loc[CAPPED, "median_us"] != 3.25 and table.loc[CLEAN, "recipe"] == ""


def test_the_overview_mark_names_the_cap(capped_history, monkeypatch):
    from test_app_pages import frame_with, open_page

    at = open_page(Path(capped_history.path), monkeypatch, "views/overview.py")
    marks_shown = frame_with(at, "marks")["marks"].tolist()
    assert sum(1 for m in marks_shown if str(m).startswith("throttled: power cap (40 of ")) == 1


@pytest.fixture(scope="module")
def capped_report(fixtures_dir):
    report = make_report(fixtures_dir)
    first = report.cases[0]
    capped = dataclasses.replace(
        first, head=dataclasses.replace(first.head, throttle_reasons=["gpu_idle", "sw_power_cap"])
    )
    return dataclasses.replace(report, cases=[capped, *report.cases[1:]])


def test_the_comment_row_says_which_side_ran_under_a_cap(capped_report):
    body = render_comment(capped_report)
    capped = capped_report.cases[0].case_id
    rows = [line for line in body.splitlines() if line.startswith(f"| `{capped}`")]
    assert rows and all("⚠ power cap (head)" in row for row in rows)
    assert body.count("⚠ power cap") == len(rows)  # no other row is marked


def test_the_sides_reasons_survive_the_report_file_and_an_older_report_reads_as_none(capped_report, tmp_path):
    path = write_report(capped_report, tmp_path / "compare.json")
    assert load_report(path).cases[0].head.throttle_reasons == ["gpu_idle", "sw_power_cap"]
    document = json.loads(path.read_text())
    document["schema_version"] = 3
    for case in document["cases"]:
        for side in ("base", "head"):
            case[side].pop("throttle_reasons")
    path.write_text(json.dumps(document))
    assert all(c.head.throttle_reasons == [] for c in load_report(path).cases)
