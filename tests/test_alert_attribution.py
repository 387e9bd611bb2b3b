"""Every step alert says what moved: code, configuration, environment, machine, or nothing.

Each series is derived from one real H200 bundle (tests/data/bundles/h200-fa4-fa-grid-fp16-86302dc,
96 cases of sdpa, sdpa_flash, sdpa_cudnn and fa4_sm90 over the FlashAttention-paper grid):
twelve copies on twelve commits of main, the case `fa4_sm90/fa_s1024_d64/fp16/noncausal` made 10%
slower (every latency statistic, its samples) from the seventh on. Fields edited from the real
bundle, per test: the run's id, commit, times and a declared pool (every copy), the format-4
fingerprints (each variant's code digest), and from the seventh copy on the one field the test
names (torch_version, gpu_uuid, the case's kernel_config, or fa4_sm90's code digest).
"""

from __future__ import annotations

import json
import shutil
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from history_copies import ModuleHistories
from attnwatch.cli.main import main
from attnwatch.ci.integration.notify.messages import Transition, payload
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE = REPO_ROOT / "tests" / "data" / "bundles" / "h200-fa4-fa-grid-fp16-86302dc.tgz"
CASE = "fa4_sm90/fa_s1024_d64/fp16/noncausal"
VARIANTS = ("sdpa", "sdpa_flash", "sdpa_cudnn", "fa4_sm90")
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
STEP_AT, RUNS, SLOWER = 6, 12, 1.10


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real")
    with tarfile.open(SOURCE) as archive:
        archive.extractall(out, filter="data")
    (found,) = [p for p in out.iterdir() if p.is_dir()]
    return found


def _scaled(timing: dict, factor: float) -> dict:
    for key, value in list(timing.items()):
        if isinstance(value, float) and (key.endswith("_us") or key == "us_per_head"):
            timing[key] = value * factor
    timing["tflops"] = timing["tflops"] / factor
    if timing.get("gap_to_baseline") is not None:
        timing["gap_to_baseline"] *= factor
    return timing


def series(real: Path, out: Path, edit=None, fingerprints: bool = True) -> list[Path]:
    """RUNS copies of the real bundle on consecutive commits; `edit(manifest, timing_of_case)`
    changes the copies from STEP_AT on (see the module doc)."""
    paths = []
    for i in range(RUNS):
        bundle = out / f"r{i:02d}"
        shutil.copytree(real, bundle)
        manifest = json.loads((bundle / "manifest.json").read_text())
        timings = json.loads((bundle / "timings.json").read_text())
        samples = json.loads((bundle / "samples.json").read_text())
        when = T0 + timedelta(hours=i)
        manifest.update(
            run_id=f"attr-{out.name}-{i:02d}",
            commit_sha=f"{i + 1:07x}a",
            branch="main",
            trigger="push",
            parent_sha=f"{i:07x}a" if i else None,
            started_at=when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            finished_at=(when + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            commit_date=when.isoformat(),
        )
        manifest["environment"]["pool"] = "h200-pool"
        if fingerprints:
            manifest["schema_version"] = 4
            manifest["fingerprints"] = {
                v: {"digest": f"{v}-all", "code": f"{v}-code".ljust(16, "0"), "unknown": None} for v in VARIANTS
            }
        (timing,) = [t for t in timings["timings"] if t["case_id"] == CASE]
        if i >= STEP_AT:
            _scaled(timing, SLOWER)
            samples["samples"][CASE] = [s * SLOWER for s in samples["samples"][CASE]]
            if edit is not None:
                edit(manifest, timing)
        (bundle / "manifest.json").write_text(json.dumps(manifest))
        (bundle / "timings.json").write_text(json.dumps(timings))
        (bundle / "samples.json").write_text(json.dumps(samples))
        paths.append(bundle)
    return paths


# Each history of this module is built once and copied into the next test that asks for it.
HISTORIES = ModuleHistories()
_history_copies = HISTORIES.fixture()


def _ingested(real: Path, tmp_path: Path, edit=None, fingerprints: bool = True) -> Path:
    """tmp_path/history.duckdb holding `series(real, ..., edit, fingerprints)`."""
    db = tmp_path / "history.duckdb"
    key = (edit.__name__ if edit else None, fingerprints)
    HISTORIES.make(
        key, db, lambda path: ingest_paths(parse_location(path), series(real, tmp_path / "s", edit, fingerprints))
    )
    return db


def _alert_of(db: Path):
    assert main(["--db", str(db), "detect"]) == 0
    found = [a for a in list_alerts(parse_location(db)) if a.case_id == CASE and a.metric == "median_us"]
    assert len(found) == 1, [(a.case_id, a.metric) for a in list_alerts(parse_location(db))]
    return found[0]


def _edit_torch(manifest, timing):
    manifest["environment"]["torch_version"] = "2.12.0+cu130"


def _edit_gpu(manifest, timing):
    manifest["environment"]["gpu_uuid"] = "GPU-00000000-1111-2222-3333-444444444444"


def _edit_config(manifest, timing):
    timing["kernel_config"] = "m128_n128_rs_ol"


def _edit_code(manifest, timing):
    manifest["fingerprints"]["fa4_sm90"]["code"] = "fa4-changed-code"


@pytest.mark.parametrize(
    "edit, label, change",
    [
        (_edit_torch, "environment", "torch 2.11.0+cu130 → 2.12.0+cu130"),
        (
            _edit_gpu,
            "machine",
            "GPU GPU-263ebfcc-c477-a4dc-c4c5-bc4f9337309e → GPU-00000000-1111-2222-3333-444444444444",
        ),
        (_edit_config, "configuration", "configuration m192_n128_rs_ol → m128_n128_rs_ol"),
        (_edit_code, "code", "code fa4_sm90-cod → fa4-changed-"),
        (None, "none (noise suspect)", None),
    ],
)
def test_each_kind_of_step_is_attributed_on_the_alert_and_in_notifications(real_bundle, tmp_path, edit, label, change):
    """A torch upgrade mid-series, a GPU swap within a pool, a configuration flip, a code change
    (a fingerprint change) and a step with nothing recorded changed."""
    db = _ingested(real_bundle, tmp_path, edit)
    alert = _alert_of(db)
    assert alert.attribution == label
    changes = json.loads(alert.attribution_changes)
    assert [f"{c['field']} {c['before']} → {c['after']}" for c in changes] == ([change] if change else [])
    text = payload(Transition.of(alert, "opened"), "slack")["text"]
    assert f"what moved: {label}" in text and (change is None or change in text)
    assert Transition.of(alert, "opened").fields()["attribution"].startswith(label)


def test_runs_without_fingerprints_are_unknown_never_guessed(real_bundle, tmp_path):
    db = _ingested(real_bundle, tmp_path, _edit_torch, fingerprints=False)
    alert = _alert_of(db)
    assert alert.attribution == "unknown (no fingerprints recorded)"
    assert [c["field"] for c in json.loads(alert.attribution_changes)] == ["torch"]  # still shown


def test_alerts_list_shows_what_moved(real_bundle, tmp_path, capsys):
    db = _ingested(real_bundle, tmp_path, _edit_gpu)
    _alert_of(db)
    capsys.readouterr()
    assert main(["--db", str(db), "alerts", "list"]) == 0
    out = capsys.readouterr().out
    assert "moved: machine: GPU GPU-263ebfcc" in out


def test_bisect_refuses_a_step_without_a_code_part_and_says_why(real_bundle, tmp_path, capsys):
    db = _ingested(real_bundle, tmp_path, _edit_torch)
    alert = _alert_of(db)
    capsys.readouterr()
    code = main(["--db", str(db), "bisect", "--alert", str(alert.alert_id), "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert code != 0
    assert "attributed to environment (torch 2.11.0+cu130 → 2.12.0+cu130), not to code" in err
    assert "--force" in err and not (tmp_path / "b").exists()


def test_the_alerts_and_push_pages_show_what_moved(real_bundle, tmp_path, monkeypatch):
    """Alerts: the alert's row says "environment: torch ... → ..."; This push, with the newest
    run the first after the torch upgrade, says no variant's code moved and names the upgrade."""
    from test_app_pages import open_page, texts

    db = tmp_path / "history.duckdb"
    paths = series(real_bundle, tmp_path / "s", _edit_torch)
    ingest_paths(parse_location(db), paths)
    _alert_of(db)
    at = open_page(db, monkeypatch, "views/alerts.py", gpu="NVIDIA H200")
    moved = [v for frame in at.dataframe if "moved" in frame.value.columns for v in frame.value["moved"]]
    assert "environment: torch 2.11.0+cu130 → 2.12.0+cu130" in moved
    db2 = tmp_path / "push.duckdb"
    ingest_paths(parse_location(db2), paths[: STEP_AT + 1])
    at = open_page(db2, monkeypatch, "views/push.py")
    captions = " ".join(texts(at, "caption"))
    assert "between the two runs: no variant's code; environment: torch 2.11.0+cu130 → 2.12.0+cu130" in captions


def test_trends_marks_the_environment_epoch_and_the_step_that_coincides_with_it(real_bundle, tmp_path, monkeypatch):
    """The torch upgrade is a dotted line before the first run on the new torch, named by what
    changed; the alert at that run says it coincides with it (hover, and a warning under the chart)."""
    from test_app_pages import open_page, texts, trend_charts, trend_marks

    db = _ingested(real_bundle, tmp_path, _edit_torch)
    _alert_of(db)
    at = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu="NVIDIA H200",
        variants="fa4_sm90",
        shapes="fa_s1024_d64",
        dtype="fp16",
        causal="0",
    )
    (spec,) = trend_charts(at)
    (epoch,) = spec["frames"]["epochs"].to_dict("records")  # a dotted line just before the run
    assert epoch == {"pos": STEP_AT - 0.5, "label": "env: torch 2.11.0+cu130 → 2.12.0+cu130"}
    assert spec["layers"]["epochs"]["mark"]["strokeDash"] and spec["layers"]["epoch_labels"]["mark"]["type"] == "text"
    alerts = trend_marks(spec, "regression alert")
    assert any("coincides with an environment change: torch" in label for label in alerts["label"])
    assert any(
        "coincides with an environment change (torch 2.11.0+cu130 → 2.12.0+cu130)" in w for w in texts(at, "warning")
    )


def test_the_kernel_pages_charts_mark_environment_changes_too():
    """The Kernel page draws build and ncu histories with kernel_charts.lines_svg: a frame carrying
    the runs' environment fields gets the same dotted line, between the commits before and at the
    change, and a run that did not record a field is no change."""
    import xml.etree.ElementTree as ET

    import pandas as pd

    from attnwatch.app.kernel_charts import lines_svg
    from svg_charts import role, tip

    frame = pd.DataFrame(
        {
            "x": ["a1", "b2", "c3", "d4"],
            "x_order": range(4),
            "run_id": ["r1", "r2", "r3", "r4"],
            "commit_sha": ["a1", "b2", "c3", "d4"],
            "registers_per_thread": [128, 128, 128, 128],
            "driver_version": ["580.65", None, "580.65", "590.10"],
        }
    )
    chart = ET.fromstring(lines_svg(frame, "x", ["registers_per_thread"], "registers"))
    marks = role(chart, "epoch")
    assert [float(m.get("data-position")) for m in marks] == [2.5]
    assert [m.get("data-commit") for m in marks] == ["d4"]
    assert [label.text for label in role(chart, "epoch-label")] == ["env: driver 580.65 → 590.10"]
    assert tip(marks[0]) == "env: driver 580.65 → 590.10"
    line = marks[0].find("{http://www.w3.org/2000/svg}line")
    points = role(chart, "point")  # the line stands halfway between c3's point and d4's
    assert float(line.get("x1")) == pytest.approx(
        (float(points[2].get("cx")) + float(points[3].get("cx"))) / 2, abs=0.1
    )
    assert line.get("stroke-dasharray")  # dotted


def test_bisect_refuses_a_range_whose_runs_changed_no_code(real_bundle, tmp_path, capsys):
    """--good/--bad/--case: the history's runs at both commits (a real git checkout's) changed
    torch only, so the range is refused; --force would measure it."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    shas = []
    for message in ("good", "bad"):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], check=True)
        shas.append(
            subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
        )
    paths = series(real_bundle, tmp_path / "s", _edit_torch)
    chosen = [paths[STEP_AT - 1], paths[STEP_AT]]
    for path, sha in zip(chosen, shas):
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "commit_sha": sha, "parent_sha": None}))
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), chosen)
    capsys.readouterr()
    code = main(
        [
            "--db",
            str(db),
            "bisect",
            "--good",
            shas[0],
            "--bad",
            shas[1],
            "--case",
            CASE,
            "--checkout",
            str(repo),
            "--out",
            str(tmp_path / "b"),
        ]
    )
    err = capsys.readouterr().err
    assert code != 0
    assert f"between {shas[0][:12]} and {shas[1][:12]} no tracked case's code changed" in err
    assert "environment: torch 2.11.0+cu130 → 2.12.0+cu130" in err and "--force" in err
