"""One cause line, the same on every surface, on the H200's recorded barrier plant
(tests/data/ncu/plants/barrier_at1: a real `attnwatch compare --ncu changed` of one added
__syncthreads per key tile, both sides' ncu profiles and the SASS diff; sass_base/sass_head.json.gz:
both builds' static code as a run's sass.json records it, scripts/plant_sass.py).

The compare's reading of each decided case (its compare.json cause) is rendered once by
history.analysis.ncu_explain.cause_line. A history holding the same two builds (the recorded
profiles, the timed medians compare.json measured, each run's binaries' static code) gives a
stored alert the same line, the static code diff included; the PR comment, the notifications,
the Kernel page and This push show the line each was given, whole.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import gzip
import json

import pytest

from bundle_factory import SHAPES, make_bundle
from ncu_recordings import kernels_by_case
from test_explain_recorded import plant_explanations

from attnwatch.ci.compare.report import NcuExplanation, load_report
from attnwatch.ci.integration.comment.escape import md_text
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.integration.notify.messages import Transition, payload, slack_text
from attnwatch.cli.main import main
from attnwatch.history.analysis.ncu_explain import CAUSE_CHARS, cause_line
from attnwatch.history.analysis.sass_diff import describe_binaries, launched_only
from attnwatch.history.contract.sass_file import SassRecords, check_sass
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.detection.ncu_cause import alert_causes, cause_of, with_cause
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
BASE_RUNS = 10  # run-0 .. run-9 are the base build; run-10, the last, is the plant's head build
VARIANTS = ("cuda_wmma", "cuda_wmma_cpasync")
PLANT = "barrier_at1"


@pytest.fixture(scope="module")
def recorded(fixtures_dir):
    """(folder, the compare's explained cases: [(compare.json case, Explanation)], the SASS diff)."""
    folder = fixtures_dir / "ncu" / "plants" / PLANT
    diff, explained = plant_explanations(folder)
    return folder, explained, diff


def recorded_report(folder, tmp):
    """The plant's compare.json, as load_report reads an artifact (gunzipped beside the test)."""
    path = tmp / "compare.json"
    path.write_bytes(gzip.decompress((folder / "compare.json.gz").read_bytes()))
    return load_report(path)


def recorded_sass(folder, side: str) -> SassRecords:
    """One side's static code as the run's bundle carries it (sass.json), read by its validator."""
    path = folder / f"sass_{side}.json.gz"
    return check_sass(json.loads(gzip.decompress(path.read_bytes())), path)


def samples(median_us: float) -> list[float]:
    """51 per-call times whose median is the compare's median exactly, spread ±0.1% around it."""
    return [median_us * (1 + 0.001 * (i - 25) / 25) for i in range(51)]


@pytest.fixture(scope="module")
def history(tmp_path_factory, recorded):
    """Main's history of the two builds: the base build's timed medians and profile for runs 0-9
    (profiled from run 8), the head build's for run 10, each case as compare.json measured it,
    and each profiled run's binaries' static code."""
    folder, _, _ = recorded
    tmp = tmp_path_factory.mktemp("cause_surfaces")
    report = recorded_report(folder, tmp)
    sides = {side: kernels_by_case(folder / f"ncu_{side}.csv.gz") for side in ("base", "head")}
    code = {side: recorded_sass(folder, side) for side in ("base", "head")}
    paths = []
    for i in range(BASE_RUNS + 1):
        side = "head" if i == BASE_RUNS else "base"
        paths.append(
            make_bundle(
                tmp / f"bundle-{i}",
                run_id=f"run-{i}",
                commit_sha=f"{i:040x}",
                started_at=T0 + timedelta(hours=i),
                commit_date=T0 + timedelta(hours=i),
                commit_message="Add a barrier to the key loop" if side == "head" else f"Push {i}",
                gpu_name="NVIDIA H200",
                variants=VARIANTS,
                shapes=SHAPES[1:3],  # h100_small, b4_h16_s1k: the pr cases the compare ran
                recorded={c.case_id: samples(getattr(c, side).median_us) for c in report.cases},
                with_ncu=i >= BASE_RUNS - 2,
                sass=code[side],
                ncu_launches={
                    cid: [(k.kernel_name, dict(k.metrics)) for k in kernels] for cid, kernels in sides[side].items()
                },
            )
        )
    db = tmp / "history.duckdb"
    ingest_paths(parse_location(db), paths)
    assert main(["--db", str(db), "detect"]) == 0
    return db


def code_part(diff, case) -> str:
    """The compare's static-code part of a case's cause: its launched kernels' SASS diff."""
    names = [k.kernel_name for k in kernels_by_case_cached(case)]
    return describe_binaries(launched_only(diff, names))


_KERNELS: dict = {}


def kernels_by_case_cached(case) -> list:
    return _KERNELS[case["case_id"]]


@pytest.fixture(scope="module", autouse=True)
def _kernels(recorded):
    folder, _, _ = recorded
    _KERNELS.update(kernels_by_case(folder / "ncu_head.csv.gz"))


def test_the_compare_cause_line_names_the_barrier_per_loop_iteration_and_what_it_cost(recorded):
    """What a kernel engineer reads for each decided case: the added BAR in the loop of the
    kernel the case launched, the BARs executed per call, and the top rule with its numbers in
    readable precision (an exact +0.12% was printed "+0%", its band "±0%") and the share of the
    measured change it accounts for."""
    _, explained, diff = recorded
    assert len(explained) == 7
    for case, found in explained:
        change = case["head"]["median_us"] - case["base"]["median_us"]
        assert found.cause.startswith(code_part(diff, case) + "; +"), found.cause
        assert "+1 BAR in a loop" in found.cause and " BAR; " in found.cause
        assert "+0%" not in found.cause and "±0%" not in found.cause, found.cause
        assert found.cause.endswith(f" of the {change:+.3g} µs"), found.cause
        assert found.cause == cause_line(found.cause.split("; "))  # rendered once: the renderer's own output


def test_a_stored_alert_notification_kernel_page_and_this_push_say_what_the_compare_said(
    history, recorded, monkeypatch
):
    """The history of the same two builds explains the head run's step with the compare's line:
    the same static code change of the case's own kernel (diffed from the two runs' stored
    binaries), the same exact counts, the same rule, the same share of the same measured change.
    Before, the history stored no binaries and its line lacked the code part."""
    location = parse_location(history)
    _, explained, diff = recorded
    for case, found in explained:
        stored = cause_of(location, "regression", f"run-{BASE_RUNS}", case["case_id"])
        assert stored is not None, case["case_id"]
        assert stored.cause.startswith(code_part(diff, case) + "; "), stored.cause
        assert found.cause == stored.cause, (found.cause, stored.cause)

    # main's detection opens an alert only past min_effect (2% on the H200) held for 3 runs; where
    # it did, its stored cause is this line, and so is its notification's note
    alerts = [a for a in list_alerts(location, {"limit": 1000}) if a.kind == "regression"]
    causes = alert_causes(location, alerts)
    for alert in alerts:
        assert causes[alert.alert_id].cause == cause_of(location, "regression", alert.run_id, alert.case_id).cause
    for case, _ in explained:
        stored = cause_of(location, "regression", f"run-{BASE_RUNS}", case["case_id"])
        detail = f"median_us {case['base']['median_us']:.1f} → {case['head']['median_us']:.1f} µs"
        note = with_cause(detail, stored)
        t = Transition(
            "opened",
            1,
            "regression",
            case["case_id"],
            "median_us",
            "NVIDIA H200",
            f"{BASE_RUNS:040x}",
            None,
            "open",
            note,
            "attnwatch detect",
            "key",
        )
        assert slack_text(stored.cause, CAUSE_CHARS) in payload(t, "slack")["text"]
        assert payload(t, "json")["alert"]["note"].endswith(stored.cause)

    from test_app_pages import open_page, texts
    from test_app_push import open_push

    case = explained[0][0]["case_id"]
    variant = case.split("/")[0]
    expected = cause_of(location, "regression", f"run-{BASE_RUNS}", case).cause
    at = open_page(history, monkeypatch, "views/kernel.py", gpu="NVIDIA H200", variant=variant)
    lines = [m for m in texts(at, "markdown") if m.startswith("**Against the profiled run before")]
    assert lines and any(expected in line.replace("\\", "") for line in lines), lines
    at = open_push(history, monkeypatch)
    whys = [m.value.replace("\\", "") for e in at.expander for m in e.markdown if "**ncu cause**" in m.value]
    shown = [w.split("): ", 1)[1] for w in whys for w in w.split("  \n") if w.startswith("**ncu cause** (")]
    assert shown and all(
        any(s == cause_of(location, "regression", f"run-{BASE_RUNS}", c["case_id"]).cause for c, _ in explained)
        for s in shown
    ), shown


def test_the_pr_comment_shows_each_decided_case_s_line_whole(recorded, tmp_path):
    """compare.json's cause of each decided case, as the comment renders it: the whole line."""
    folder, explained, _ = recorded
    report = recorded_report(folder, tmp_path)
    by_case = {c["case_id"]: f for c, f in explained}
    for c in report.cases:
        if c.case_id in by_case:
            c.explanation = NcuExplanation(by_case[c.case_id].cause, [], [])
    body = render_comment(report)
    for cid, found in by_case.items():
        assert f"**{md_text(found.cause, CAUSE_CHARS)}**" in body, cid


def test_a_cause_longer_than_any_surface_shows_keeps_what_the_change_cost_whole():
    """The renderer's cut: the code and counter parts give way, the top rule's share stays."""
    code = "; ".join(f"attn_k{i}: +1 BAR in a loop" for i in range(40))
    rule = "warps wait at barriers (0.21 → 0.24, +14%, noise ±9%), accounts for about 0.603 of the +1.05 µs"
    line = cause_line([code, rule])
    assert len(line) == CAUSE_CHARS and line.endswith("…; " + rule) and line.startswith("attn_k0: +1 BAR")
    assert cause_line(["a  b\nc", "d"]) == "a b c; d"
