"""Every dashboard page under Streamlit's AppTest, on a history built from real bundles
(tests/app_history.py: bundle_factory + history.ingest.write + history.detection.alerts)."""

from __future__ import annotations

import json
import re
from pathlib import Path


import pytest
from streamlit.testing.v1 import AppTest

from alert_form import fill
from app_history import (
    CRASHED_CASE,
    H200,
    HOSTILE_MESSAGE,
    INCORRECT_CASE,
    L4,
    REGRESSED_CASE,
    add_real_ncu_run,
    build_history,
    build_synthetic_history,
    main_run_id,
)
from attnwatch.app.data.trends import METRICS
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.links import PAGES as DECLARED_PAGES
from attnwatch.history.store.location import parse_location
from svg_charts import charts_by_key, role, series, svg_images

ENTRYPOINT = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"
PAGES = tuple(page.script for page in DECLARED_PAGES)  # every page's view, in the navigation's order


@pytest.fixture(scope="module")
def history(tmp_path_factory, fixtures_dir):
    work = tmp_path_factory.mktemp("app_history")
    db = work / "history.duckdb"
    runs = build_history(db, work / "bundles")
    runs["ncu"] = add_real_ncu_run(db, work / "bundles", fixtures_dir)
    return db, runs


def open_page(db: Path, monkeypatch, page: str = "views/overview.py", **query) -> AppTest:
    """Run the app on `page` with ATTNWATCH_DB pointing at `db` and the given URL query."""
    monkeypatch.setenv("ATTNWATCH_DB", str(db))
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()  # the first page (This push)
    if page != PAGES[0]:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def texts(at: AppTest, kind: str) -> list[str]:
    """Messages as a reader sees them: the markdown escapes the app adds to data removed."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in getattr(at, kind)]


def trend_charts(at: AppTest) -> list[dict]:
    """Each Vega-Lite chart on the page (the trend, app/trend_chart.py): its spec, with the named
    datasets Streamlit sends as Arrow read back as DataFrames under "frames", and each layer under
    "layers" by name."""
    from streamlit import dataframe_util

    found = []
    for chart in at.get("vega_lite_chart"):
        spec = json.loads(chart.proto.spec)
        spec["frames"] = {
            d.name: dataframe_util.convert_arrow_bytes_to_pandas_df(d.data.data) for d in chart.proto.datasets
        }
        spec["layers"] = {layer["name"]: layer for layer in spec.get("layer", [])}
        found.append(spec)
    return found


def trend_points(spec: dict, series: str | None = None):
    """The trend's points (of one series, in commit order when `series` is named)."""
    points = spec["frames"]["points"]
    if series is None:
        return points
    return points[points["series"] == series].sort_values("pos").reset_index(drop=True)


def trend_marks(spec: dict, kind: str):
    """The open symbols of one kind ("regression alert", "kernel config changed", ...)."""
    marks = spec["frames"].get("marks")
    assert marks is not None, f"the chart draws no marks: {sorted(spec['frames'])}"
    return marks[marks["kind"] == kind].reset_index(drop=True)


def frame_with(at: AppTest, column: str):
    for df in at.dataframe:
        if column in df.value.columns:
            return df.value
    raise AssertionError(f"no table with a {column!r} column; tables: {[list(d.value.columns) for d in at.dataframe]}")


# --- Overview ---------------------------------------------------------------------------------


def test_overview_shows_latest_complete_main_run_and_says_newest_failed(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch)
    assert any(runs["failed"] in w and "did not complete" in w for w in texts(at, "warning"))
    cases = frame_with(at, "trend_us")
    assert len(cases) == 16
    by_case = cases.set_index("case_id")
    assert by_case.loc[CRASHED_CASE, "status"] == "crashed"
    assert by_case.loc[INCORRECT_CASE, "correct"] == False  # noqa: E712
    sdpa_rows = cases[cases["variant"] == "sdpa"]
    assert (sdpa_rows["gap_to_baseline"].round(9) == 1.0).all()
    # The sparkline spans the main runs up to the shown one (8), oldest first, with the step.
    trend = list(by_case.loc[REGRESSED_CASE, "trend_us"])
    assert len(trend) == 8 and trend[-1] > trend[0] * 1.05
    rel = list(by_case.loc[REGRESSED_CASE, "trend_rel"])  # the sparkline: one scale for every row
    assert abs(rel[0] - 1) < 0.02 and rel[-1] > 1.05  # the median sits on the longer (earlier) level
    sdpa_rel = [x for t in cases[cases["variant"] == "sdpa"]["trend_rel"] for x in t]
    assert max(abs(x - 1) for x in sdpa_rel) < 0.02  # 1% noise stays a flat line
    assert by_case.loc[REGRESSED_CASE, "open_regressions"] == 2  # latency and gap-to-SDPA steps
    alerts = frame_with(at, "alert_id")
    triton_cases = {c for c in cases["case_id"] if c.startswith("triton_fa2/")}
    assert set(alerts["case_id"]) == triton_cases | {INCORRECT_CASE}
    assert set(alerts[alerts["kind"] == "regression"]["run_id"]) == {runs["after_step"]}


def test_overview_on_a_gpu_without_sdpa_says_there_is_no_gap(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, gpu=L4)
    assert any("No gap to baseline" in i for i in texts(at, "info"))
    assert frame_with(at, "trend_us")["gap_to_baseline"].isna().all()
    assert any("Only one main run" in c for c in texts(at, "caption"))


def test_overview_gpu_picker_switches_gpu(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch)
    at.selectbox(key="overview_gpu").select(L4).run()
    assert not at.exception
    assert set(frame_with(at, "trend_us")["variant"]) == {"triton_fa2", "cuda_wmma"}
    assert at.query_params["gpu"] == [L4] or at.query_params["gpu"] == L4


# --- Empty, broken and synthetic histories -----------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_page_explains_an_empty_history(tmp_path, monkeypatch, page):
    at = open_page(tmp_path / "missing.duckdb", monkeypatch, page)
    assert any("history is empty" in i for i in texts(at, "info"))
    assert not at.dataframe and not at.get("vega_lite_chart") and not svg_images(at)


@pytest.mark.parametrize("page", ("views/overview.py", "views/trends.py", "views/sql.py"))
def test_a_file_that_is_not_a_history_is_a_message_not_a_traceback(tmp_path, monkeypatch, page):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"this is not a duckdb file" * 100)
    at = open_page(junk, monkeypatch, page)
    assert any(str(junk) in w for w in texts(at, "warning")), texts(at, "warning")


@pytest.mark.parametrize("page", PAGES)
def test_synthetic_history_is_labelled_on_every_page(tmp_path, monkeypatch, page):
    db = tmp_path / "synthetic.duckdb"
    build_synthetic_history(db, tmp_path / "bundles")
    at = open_page(db, monkeypatch, page)
    assert any("SYNTHETIC DATA" in e and "not measurements" in e for e in texts(at, "error"))


# --- Trends ----------------------------------------------------------------------------------


def choose_trend(at: AppTest, variants, shape, metric=None, causal=False) -> AppTest:
    at.multiselect(key="trends_variants").set_value(list(variants))
    at.multiselect(key="trends_shapes").set_value([shape])
    if metric:
        at.selectbox(key="trends_metric").set_value(METRICS[metric].column)
    at.toggle(key="trends_causal").set_value(causal)
    return at.run()


def test_trends_plots_the_step_with_band_alert_marker_and_escaped_commit(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/trends.py")
    choose_trend(at, ["triton_fa2", "sdpa"], REGRESSED_CASE.split("/")[1])
    assert not at.exception
    (spec,) = trend_charts(at)
    points = trend_points(spec)
    assert set(points["series"]) == {"triton_fa2 · l4_mission · fp16", "sdpa · l4_mission · fp16"}
    triton = trend_points(spec, "triton_fa2 · l4_mission · fp16")
    assert len(triton) == 8 and triton["value"][5:].min() > triton["value"][:5].max()
    assert list(triton["run_id"]) == [main_run_id(i) for i in range(8)]
    band = spec["layers"]["bands"]  # one p10-p90 area per series
    assert band["mark"]["type"] == "area" and band["encoding"]["detail"]["field"] == "series"
    assert points["p10"].notna().all() and (points["p10"] <= points["p90"]).all()
    markers = trend_marks(spec, "regression alert")
    assert list(markers["run_id"]) == [runs["after_step"]]  # only the latency alert on a latency chart
    # The hostile commit travels as plain text for Vega's tooltip, which escapes what it shows; no
    # part of the spec is markup.
    assert any("<script>" in m for m in points["message"])
    assert "<script>" not in json.dumps({k: v for k, v in spec.items() if k != "frames"})
    alert_table = frame_with(at, "alert_id")
    assert sorted(alert_table["metric"]) == ["gap_to_baseline", "median_us"]  # both found by detection


def test_trends_ncu_metric_without_profiles_says_so(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/trends.py")
    choose_trend(at, ["triton_fa2"], "l4_mission", metric="ncu: achieved TFLOPS")
    assert not at.get("vega_lite_chart")
    assert any("ncu metrics exist only for profiled runs" in i for i in texts(at, "info"))


def test_trends_charts_the_correctness_error_and_its_margin(history, monkeypatch):
    """The check's error is stored per seed and charted per run (worst seed): the failed check
    of the newest complete run stands out, with its correctness alert on the point."""
    db, runs = history
    at = open_page(db, monkeypatch, "views/trends.py")
    variant, shape = INCORRECT_CASE.split("/")[:2]
    for metric, passing, failing in (
        ("correctness: max abs error", 1e-3, 0.25),
        ("correctness: tolerance used (1 = fails)", 0.04, 8.3),
    ):
        choose_trend(at, [variant], shape, metric=metric)
        assert not at.exception
        (spec,) = trend_charts(at)
        (name,) = set(trend_points(spec)["series"])
        line = trend_points(spec, name)
        assert list(line["value"]) == pytest.approx([passing] * 7 + [failing]), metric
        assert line["run_id"].iloc[-1] == runs["latest_complete"]
        assert list(trend_marks(spec, "correctness alert")["run_id"]) == [runs["latest_complete"]]


def test_trends_with_nothing_selected_asks_for_a_choice(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/trends.py")
    at.multiselect(key="trends_variants").set_value([]).run()
    assert any("at least one variant" in i for i in texts(at, "info"))


def test_trends_other_branch_shows_the_pr_run(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/trends.py")
    at.selectbox(key="trends_branch").select("feature/tiles").run()
    (spec,) = trend_charts(at)
    assert set(trend_points(spec)["run_id"]) == {runs["pr"]}


# --- Compare ---------------------------------------------------------------------------------


def test_compare_finds_the_planted_regression_and_only_it(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py", base=runs["before_step"], head=runs["after_step"])
    table = frame_with(at, "verdict").set_index("case_id")
    triton = [c for c in table.index if c.startswith("triton_fa2/")]
    assert (table.loc[triton, "verdict"] == "regression").all()
    assert (table.loc[triton, "ratio_low"] > 1.05).all()
    others = table.drop(index=triton)
    assert (others["verdict"] == "no change").all(), others["verdict"].value_counts()
    assert at.get("download_button")
    assert any("min_effect of 2.0%" in c for c in texts(at, "caption"))  # the H200 threshold from config


def test_compare_reports_crashed_and_failed_cases_by_status(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py", base=main_run_id(6), head=runs["latest_complete"])
    table = frame_with(at, "verdict").set_index("case_id")
    assert table.loc[CRASHED_CASE, "verdict"] == "head crashed"
    assert table.loc[INCORRECT_CASE, "verdict"] == "head failed"


def test_compare_verdict_filter_and_same_run(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py", base=runs["before_step"], head=runs["after_step"])
    at.multiselect(key="compare_verdicts").set_value(["regression"]).run()
    assert set(frame_with(at, "verdict")["verdict"]) == {"regression"}
    at2 = open_page(db, monkeypatch, "views/compare.py", base=runs["after_step"], head=runs["after_step"])
    assert any("same run" in i for i in texts(at2, "info"))


def test_compare_by_commit(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/compare.py")
    at.radio(key="compare_mode").set_value("commits").run()
    assert not at.exception
    at.text_input(key="compare_commits").input("04c0ffee..05c0ffee").run()
    assert at.query_params["commits"] == ["04c0ffee..05c0ffee"] or at.query_params["commits"] == "04c0ffee..05c0ffee"
    table = frame_with(at, "verdict").set_index("case_id")
    assert table.loc[REGRESSED_CASE, "verdict"] == "regression"


# --- Alerts ----------------------------------------------------------------------------------


def alert_id_of(db: Path, case: str, metric: str = "median_us") -> int:
    (alert,) = [a for a in list_alerts(parse_location(db)) if a.case_id == case and a.metric == metric]
    return alert.alert_id


def test_alerts_filters(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/alerts.py")
    groups = frame_with(at, "regressions")
    assert (groups["regressions"].sum(), groups["correctness"].sum()) == (8, 1)
    at.multiselect(key="alerts_kind").set_value(["correctness"]).run()
    assert list(frame_with(at, "label")["case_id"]) == [INCORRECT_CASE]
    at.text_input(key="alerts_case").input("no-such-case").run()
    assert any("No alerts match" in s for s in texts(at, "success"))


def test_acknowledge_needs_a_note_then_records_it(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    build_history(db, tmp_path / "bundles")
    target = alert_id_of(db, REGRESSED_CASE)
    at = open_page(db, monkeypatch, "views/alerts.py")
    at.text_input(key="alerts_case").input(REGRESSED_CASE).run()  # a group of this case's two alerts
    pair = {a.alert_id for a in list_alerts(parse_location(db)) if a.case_id == REGRESSED_CASE}
    at.selectbox(key="alerts_alert").set_value(target).run()
    fill(at, actor="kernel-dev")
    at.button(key="alerts_acknowledge").click().run()  # Acknowledge with an empty note
    assert any("Not changed" in e and "note" in e for e in texts(at, "error"))
    assert next(a for a in list_alerts(parse_location(db)) if a.alert_id == target).status == "open"

    fill(at, "Known: tile change in 05; <b>looking</b>", actor=None)
    at.button(key="alerts_acknowledge").click().run()
    assert not at.exception
    assert any(f"#{target}" in s and "now acknowledged" in s for s in texts(at, "success"))
    stored = next(a for a in list_alerts(parse_location(db)) if a.alert_id == target)
    assert (stored.status, stored.actor, stored.note) == (
        "acknowledged",
        "kernel-dev",
        "Known: tile change in 05; <b>looking</b>",
    )

    fill(at, scope="group")  # the pair, one of them acknowledged: resolved together once confirmed
    at.button(key="alerts_resolve").click().run()
    at.button(key="alerts_confirm").click().run()
    assert {a.status for a in list_alerts(parse_location(db)) if a.alert_id in pair} == {"resolved"}
    at.multiselect(key="alerts_status").set_value(["resolved"]).run()
    assert set(frame_with(at, "label")["alert_id"]) == pair


# --- Kernel ----------------------------------------------------------------------------------


def test_kernel_page_build_report_over_runs(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/kernel.py", variant="cuda_wmma")
    builds = frame_with(at, "registers_per_thread")
    assert len(builds) == 8 and (builds["registers_per_thread"] == 128).all()
    assert len([c for c in svg_images(at) if c.get("data-chart") == "lines"]) >= 2
    assert not at.get("vega_lite_chart")


def test_kernel_page_roofline_from_real_ncu_under_measured_ceilings(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/kernel.py", variant="sdpa")
    at.multiselect(key="kernel_roofline_variants").set_value(["sdpa", "sdpa_flash", "torch_3op"]).run()
    roofline = charts_by_key(at)["roofline_chart"]
    (roof,) = role(roofline, "roof")
    assert float(roof.get("data-peak")) == pytest.approx(666.5904706742397)  # fp16 GEMM measured on the H200
    assert float(roof.get("data-bandwidth")) == pytest.approx(4.220418019123357)  # measured copy TB/s
    points = {name: (float(p[0].get("data-x")), float(p[0].get("data-value"))) for name, p in series(roofline).items()}
    assert set(points) == {"sdpa · fp16", "sdpa_flash · fp16", "torch_3op · fp16"}
    # Every real kernel sits under the roof, and the unfused path moves more bytes per FLOP.
    for x, y in points.values():
        assert 0 < y <= min(666.6, 4.2205 * x)
    assert points["torch_3op · fp16"][0] < points["sdpa_flash · fp16"][0]
    assert any("h200_sdpa_backends.json" in c for c in texts(at, "caption"))
    # the newest profiled run's kernels: the bare name first, ncu's full name last
    kernels = frame_with(at, "kernel_name")
    assert list(kernels.columns[:2]) == ["kernel_index", "kernel"] and kernels.columns[-1] == "kernel_name"


def test_kernel_page_without_ceilings_for_the_gpu_says_so(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/kernel.py", gpu=L4, variant="triton_fa2")
    (info,) = [i for i in texts(at, "info") if "roofline cannot be drawn" in i]
    assert "No ceilings for this device" in info and "NVIDIA L4" in info


# --- Run -------------------------------------------------------------------------------------


def test_run_page_shows_hostile_commit_message_as_plain_text(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/run.py", run=main_run_id(6))
    assert HOSTILE_MESSAGE in texts(at, "text")
    assert not any("<script>" in m for m in texts(at, "markdown"))


def test_run_page_failed_and_unknown_runs(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/run.py", run=runs["failed"])
    assert any("status is 'failed'" in w for w in texts(at, "warning"))
    at = open_page(db, monkeypatch, "views/run.py", run="no-such-run")
    assert any("No run with id 'no-such-run'" in w for w in texts(at, "warning"))


def test_run_page_ncu_run_lists_its_cases(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/run.py", run=runs["ncu"])
    assert set(frame_with(at, "case_id")["variant"]) == {"sdpa", "sdpa_flash", "torch_3op"}
    assert H200 in frame_with(at, "value")["value"].tolist()


def test_compare_defaults_to_newest_complete_run_against_main_before_it(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py")
    assert at.selectbox(key="compare_head_runs").value == runs["pr"]
    assert at.selectbox(key="compare_base_runs").value == runs["latest_complete"]
    table = frame_with(at, "verdict")
    assert not table["verdict"].str.contains("nan").any()


def test_compare_against_a_failed_run_names_the_statuses(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py", base=runs["failed"], head=runs["latest_complete"])
    verdicts = set(frame_with(at, "verdict")["verdict"])
    assert "new case (head only)" in verdicts and "fixed (base crashed)" in verdicts


def test_acknowledge_without_a_name_is_refused_with_a_message(tmp_path, monkeypatch):
    db = tmp_path / "history.duckdb"
    build_history(db, tmp_path / "bundles")
    target = alert_id_of(db, REGRESSED_CASE)
    at = open_page(db, monkeypatch, "views/alerts.py")
    at.text_input(key="alerts_case").input(REGRESSED_CASE).run()
    fill(at, "a note", actor=None)
    at.button(key="alerts_acknowledge").click().run()
    assert any("Not changed" in e and "actor" in e for e in texts(at, "error"))
    assert next(a for a in list_alerts(parse_location(db)) if a.alert_id == target).status == "open"


def test_overview_lists_each_gpus_latest_main_run(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch)
    summary = frame_with(at, "cases_crashed").set_index("device")
    assert summary.loc[H200, "run_id"] == runs["latest_complete"] and summary.loc[L4, "run_id"] == runs["l4"]
    assert summary.loc[H200, "cases_crashed"] == 1
    assert summary.loc[H200, "open_regressions"] == 4  # 4 triton cases (each with a latency and a gap alert)
    assert summary.loc[H200, "open_correctness"] == 1


def test_compare_from_a_run_link_uses_main_before_it_as_base(history, monkeypatch):
    db, runs = history
    at = open_page(db, monkeypatch, "views/compare.py", head=runs["after_step"])
    assert at.selectbox(key="compare_base_runs").value == runs["before_step"]
    assert at.selectbox(key="compare_head_runs").value == runs["after_step"]


def test_a_hostile_run_id_in_the_url_is_shown_escaped(history, monkeypatch):
    db, _ = history
    at = open_page(db, monkeypatch, "views/run.py", run="[login](http://evil.example) ![x](http://t.example/p.png)")
    (warning,) = [w.value for w in at.warning]
    assert "\\[login\\]\\(http" in warning and "\\!\\[x\\]" in warning  # markdown cannot make a link or image


@pytest.mark.parametrize("page", [p for p in PAGES if p != "views/sql.py"])
def test_a_cell_without_a_value_is_shown_empty_not_as_none(history, monkeypatch, page):
    """Streamlit draws a missing value as the word "None", which reads as a value: every table of
    the pages shows app.ui.EMPTY_CELL instead (the SQL page keeps NULLs as the query returned them)."""
    from attnwatch.app.ui import EMPTY_CELL

    at = open_page(history[0], monkeypatch, page)
    assert not at.exception
    tables = list(at.dataframe)
    assert tables or page in ("views/push.py", "views/trends.py"), f"{page}: no table drawn to check"
    assert all(t.proto.placeholder == EMPTY_CELL for t in tables), page


def test_compare_against_a_pinned_baseline(history, monkeypatch, tmp_path):
    """history/analysis/baselines.toml pins a commit; the page compares any run with its newest run on the GPU."""
    db, runs = history
    pinned = tmp_path / "baselines.toml"
    pinned.write_text(f'[[baseline]]\nname = "v1.2"\ncommit = "{"04c0ffee"}"\nreason = "release v1.2"\n')
    monkeypatch.setenv("ATTNWATCH_BASELINES", str(pinned))
    at = open_page(db, monkeypatch, "views/compare.py", baseline="v1.2", head=runs["after_step"])
    assert not at.exception and at.radio(key="compare_mode").value == "pinned baseline"
    assert any("release v1.2" in c for c in texts(at, "caption"))
    table = frame_with(at, "verdict").set_index("case_id")
    assert table.loc[REGRESSED_CASE, "verdict"] == "regression"
    assert at.query_params["baseline"] in (["v1.2"], "v1.2")


def test_every_result_offers_the_command_that_measures_it_again(history, monkeypatch):
    """Run and Overview pages: `git checkout SHA && attnwatch run` for the exact case; Compare
    page: the A/B of the two runs' commits for the exact case (history.reproduce)."""
    db, runs = history
    at = open_page(db, monkeypatch, "views/run.py", run=runs["after_step"])
    table = frame_with(at, "measure_again").set_index("case_id")
    variant, shape, dtype, mode = REGRESSED_CASE.split("/")
    command = table.loc[REGRESSED_CASE, "measure_again"]
    assert command.startswith("git checkout --detach ") and command.endswith(
        f"attnwatch run --shapes {shape} --variants {variant} --dtypes {dtype} --causal {'yes' if mode == 'causal' else 'no'}"
    )
    assert (table["measure_again"] != "").all()
    overview = frame_with(open_page(db, monkeypatch, "views/overview.py"), "measure_again")
    assert overview["measure_again"].str.contains(" && attnwatch run --shapes ").all()
    assert not overview["measure_again"].str.contains("#").any()  # clean checkouts: no dirty note
    at = open_page(db, monkeypatch, "views/compare.py", base=runs["before_step"], head=runs["after_step"])
    table = frame_with(at, "measure_again").set_index("case_id")
    assert table.loc[REGRESSED_CASE, "measure_again"].startswith("attnwatch compare --base ")
    assert f"--shapes {shape} --variants {variant}" in table.loc[REGRESSED_CASE, "measure_again"]
