"""Charts that read right: commits in commit order on the x axis (run time on hover), one colour per
variant whatever is selected, log scale and normalise-to-baseline, and defaults taken from the
data (the GPU of the newest regression, the dtypes and variants measured there)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from attnwatch.app.charts import CUTLASS_3K_COLOR, HASHED_COLORS, VARIANT_COLORS, variant_color
from attnwatch.kernels import registry
from app_history import H100, H200, PUSH_REGRESSED_VARIANT, START, build_push_history, push_commit, push_run_id
from bundle_factory import SHAPES, make_bundle
from attnwatch.history.detection.alerts import list_alerts, resolve_many
from attnwatch.history.ingest.write import ingest_paths
from test_app_pages import open_page, trend_charts, trend_points
from attnwatch.history.store.location import parse_location


@pytest.fixture(scope="module")
def push_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("chart_history")
    db = work / "history.duckdb"
    ids = build_push_history(db, work / "bundles")
    # A late-started rerun of an early commit: by start time it is the newest point, by commit the second.
    late = make_bundle(
        work / "bundles" / "rerun",
        run_id="h200-rerun-01",
        variants=("sdpa", "triton_fa2"),
        commit_sha=push_commit(1),
        commit_date=START + timedelta(hours=1, minutes=-10),
        started_at=START + timedelta(hours=30),
        seed=555,
    )
    # Another GPU measured in bf16 only, and an old cuda_scalar build (alphabetically first variant).
    l4 = make_bundle(
        work / "bundles" / "l4",
        run_id="l4-bf16-00",
        variants=("sdpa", "triton_fa2"),
        dtypes=("bf16",),
        gpu_name="NVIDIA L4",
        started_at=START - timedelta(days=1),
        seed=556,
    )
    scalar = make_bundle(
        work / "bundles" / "scalar",
        run_id="h200-scalar-00",
        variants=("cuda_scalar",),
        shapes=SHAPES[:1],
        started_at=START - timedelta(days=2),
        seed=557,
    )
    ingest_paths(parse_location(db), [late, l4, scalar])
    return db, ids


def styles(spec) -> dict[str, tuple[str, tuple]]:
    """Each series' (colour, dash) as the lines layer's scales give them."""
    encoding = spec["layers"]["lines"]["encoding"]
    colours = dict(zip(encoding["color"]["scale"]["domain"], encoding["color"]["scale"]["range"]))
    dashes = dict(zip(encoding["strokeDash"]["scale"]["domain"], encoding["strokeDash"]["scale"]["range"]))
    return {name: (colours[name], tuple(dashes[name])) for name in colours}


def axis_labels(spec) -> list[str]:
    """The commit axis' label at each position, from the points placed there."""
    points = trend_points(spec).drop_duplicates("pos").sort_values("pos")
    assert list(points["pos"]) == list(range(len(points)))  # one position per run, none skipped
    return list(points["commit_label"])


def test_x_axis_is_commit_order_with_run_time_on_hover(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants="triton_fa2",
        shapes="l4_mission",
        dtype="fp16",
        causal="0",
    )
    (spec,) = trend_charts(at)
    (name,) = set(trend_points(spec)["series"])
    line = trend_points(spec, name)
    assert list(line["run_id"]) == [
        push_run_id(H200, 0),
        push_run_id(H200, 1),
        "h200-rerun-01",
        *[push_run_id(H200, i) for i in range(2, 8)],
    ]
    assert axis_labels(spec)[:3] == [push_commit(0)[:7], push_commit(1)[:7], push_commit(1)[:7] + "·2"]
    x = spec["layers"]["lines"]["encoding"]["x"]  # positions labelled by commit, never the labels as values
    assert x["field"] == "pos" and x["type"] == "quantitative" and "datum.value" in x["axis"]["labelExpr"]
    tooltip = {t["title"]: t["field"] for t in spec["layers"]["points"]["encoding"]["tooltip"]}
    assert tooltip["run started"] == "started"
    assert line["started"][2].startswith(str((START + timedelta(hours=30)).date()))


def test_a_variant_keeps_its_colour_whatever_is_selected(push_history, monkeypatch):
    db, _ = push_history
    colours = []
    for chosen in ("triton_fa2", "sdpa,triton_fa2", "cuda_wmma,sdpa_flash,triton_fa2"):
        at = open_page(
            db,
            monkeypatch,
            "views/trends.py",
            gpu=H200,
            variants=chosen,
            shapes="l4_mission,h100_small",
            dtype="fp16",
            causal="0",
        )
        (spec,) = trend_charts(at)
        triton = [style for name, style in styles(spec).items() if name.startswith("triton_fa2")]
        assert len(triton) == 2 and triton[0][1] != triton[1][1]  # shapes by dash
        colours += [colour for colour, _ in triton]
    assert set(colours) == {variant_color("triton_fa2")}
    assert len({variant_color(v) for v in ("sdpa", "sdpa_flash", "triton_fa2", "cuda_wmma")}) == 4


def test_every_registered_variant_has_a_colour_no_other_variant_of_its_operator_has():
    """Checked against the registry: fa4_sm90 was drawn in sdpa_math's grey, rmsnorm_triton and
    rmsnorm_liger in one colour. The CUTLASS pipeline's tiles keep the one colour they have always
    shared (charts.CUTLASS_3K_COLOR)."""
    by_colour: dict[tuple[str, str], set[str]] = {}
    for variant in registry.all_variants():
        name = "cutlass_3k_<tile>" if variant.name.startswith("cutlass_3k_") else variant.name
        by_colour.setdefault((variant.operator, variant_color(variant.name)), set()).add(name)
    assert {key: names for key, names in by_colour.items() if len(names) > 1} == {}
    assert not set(HASHED_COLORS) & (set(VARIANT_COLORS.values()) | {CUTLASS_3K_COLOR})


def test_log_scale_and_normalise_to_the_commit_ranges_base(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu=H100,
        variants="sdpa,triton_fa2",
        shapes="h100_small",
        dtype="fp16",
        causal="0",
        log="1",
        norm="1",
        commits=f"{ids['base_commit']}..{ids['head_commit']}",
    )
    (spec,) = trend_charts(at)
    y = spec["layers"]["lines"]["encoding"]["y"]
    assert y["scale"]["type"] == "log"
    base = axis_labels(spec).index(ids["base_commit"][:7])
    points = trend_points(spec)
    for name in set(points["series"]):
        line = trend_points(spec, name)
        assert line.loc[line["pos"] == base, "value"].item() == pytest.approx(1.0)
    (triton,) = [n for n in set(points["series"]) if n.startswith("triton_fa2")]
    assert trend_points(spec, triton)["value"].iloc[-1] == pytest.approx(1.12, abs=0.02)  # the push's +12%
    assert "÷ value at BASE" in y["title"]


def test_defaults_follow_this_pushs_first_regression(push_history, monkeypatch):
    db, _ = push_history
    # Resolve the H100's regression alerts: the newest unresolved alert is then cuda_wmma's on the H200,
    # while This push leads with triton_fa2. Every page opens on what This push said first.
    resolve_many(
        parse_location(db),
        [a.alert_id for a in list_alerts(parse_location(db)) if a.gpu_name == H100 and a.kind == "regression"],
        "seen",
        "t",
    )
    push = open_page(db, monkeypatch, "views/push.py")
    cause = next(e for e in push.expander if "triton" in e.label)
    first_row = cause.markdown[-1].value.splitlines()[2].split(" | ")
    first_gpu, first_case = (cell.lstrip("| ").replace("\\", "") for cell in first_row[:2])
    at = open_page(db, monkeypatch, "views/trends.py")
    assert at.selectbox(key="trends_gpu").value == first_gpu
    assert at.selectbox(key="trends_dtype").value == "fp16"  # bf16 exists in the history, but not on this GPU
    assert at.multiselect(key="trends_variants").value[0] == PUSH_REGRESSED_VARIANT
    (shape,) = at.multiselect(key="trends_shapes").value
    mode = "causal" if at.toggle(key="trends_causal").value else "noncausal"
    assert f"{shape} fp16 {mode}" in first_case, first_case
    kernel = open_page(db, monkeypatch, "views/kernel.py")
    assert (kernel.selectbox(key="kernel_gpu").value, kernel.selectbox(key="kernel_variant").value) == (
        first_gpu,
        PUSH_REGRESSED_VARIANT,
    )
    overview = open_page(db, monkeypatch, "views/overview.py")
    assert overview.selectbox(key="overview_gpu").value == first_gpu


def test_a_range_without_base_marks_the_step_into_its_commit(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu=H100,
        variants="triton_fa2",
        shapes="h100_small",
        dtype="fp16",
        causal="0",
        commits=f"..{ids['head_commit']}",
    )
    (spec,) = trend_charts(at)
    (shade,) = spec["frames"]["range"].to_dict("records")  # placed by position on the commit axis
    axis = axis_labels(spec)
    assert (axis[shade["start"]], axis[shade["end"]]) == (ids["base_commit"][:7], ids["head_commit"][:7])
    assert spec["layers"]["commit_range"]["mark"]["type"] == "rect"
