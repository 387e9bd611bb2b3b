"""`attnwatch detect` and `attnwatch alerts` on a real DuckDB history built from real bundles."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import duckdb
import pytest

from bundle_factory import make_bundle
from history_copies import ModuleHistories
from attnwatch.cli.main import main
from attnwatch.history.detection.alerts import AlertError, acknowledge, alert_events, list_alerts, resolve
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
STEP_AT = 10


# Each history of this module is built once and copied into the next test that asks for it.
HISTORIES = ModuleHistories()
_history_copies = HISTORIES.fixture()


def _history(tmp_path, db_path, runs=16, start=0, slow_from=STEP_AT, broken_from=12, gpu="NVIDIA H200"):
    def build(db):
        paths = []
        for i in range(start, runs):
            paths.append(
                make_bundle(
                    tmp_path / f"bundle-{gpu[-4:]}-{i}",
                    run_id=f"{gpu[-4:]}-run-{i}",
                    commit_sha=f"{i:040x}",
                    started_at=T0 + timedelta(hours=i),
                    commit_date=T0 + timedelta(hours=i),
                    gpu_name=gpu,
                    variants=("sdpa", "triton_fa2", "cuda_wmma"),
                    variant_scale={"triton_fa2": 1.06} if i >= slow_from else None,
                    statuses={"cuda_wmma/l4_mission/fp16/causal": "failed"} if i >= broken_from else None,
                    seed=i,
                )
            )
        ingest_paths(parse_location(db), paths)

    if db_path.exists():  # runs added to a history
        build(db_path)
    else:
        HISTORIES.make((runs, start, slow_from, broken_from, gpu), db_path, build)


def _alerts(db_path):
    return list_alerts(parse_location(db_path), {"limit": 1000})


def test_detect_finds_the_planted_step_on_both_metrics_and_the_correctness_failure(tmp_path, db_path, capsys):
    _history(tmp_path, db_path)
    assert main(["--db", str(db_path), "detect"]) == 0
    alerts = _alerts(db_path)
    steps = [a for a in alerts if a.kind == "regression"]
    assert {a.case_id.split("/")[0] for a in steps} == {"triton_fa2"}  # sdpa and cuda_wmma did not move
    assert {a.metric for a in steps} == {"median_us", "gap_to_baseline"}
    assert {a.commit_sha for a in steps} == {f"{STEP_AT:040x}"}
    assert all(4.0 < a.change_pct < 8.0 for a in steps)
    broken = [a for a in alerts if a.kind == "correctness"]
    assert [(a.case_id, a.commit_sha) for a in broken] == [("cuda_wmma/l4_mission/fp16/causal", f"{12:040x}")]
    assert "regression" in capsys.readouterr().out


def test_rerun_and_more_runs_add_nothing_new(tmp_path, db_path):
    _history(tmp_path, db_path)
    assert main(["--db", str(db_path), "detect"]) == 0
    first = {a.dedup_key for a in _alerts(db_path)}
    assert main(["--db", str(db_path), "detect"]) == 0
    _history(tmp_path, db_path, runs=20, start=16)  # four more runs on main, same level
    assert main(["--db", str(db_path), "detect"]) == 0
    assert {a.dedup_key for a in _alerts(db_path)} == first


def test_a_resolved_alert_is_not_reopened(tmp_path, db_path):
    _history(tmp_path, db_path)
    main(["--db", str(db_path), "detect"])
    for a in _alerts(db_path):
        resolve(parse_location(db_path), a.alert_id, "accepted: new tiling trades latency for accuracy", "kernel-lead")
    main(["--db", str(db_path), "detect"])
    assert {a.status for a in _alerts(db_path)} == {"resolved"}


def test_no_alerts_without_a_step(tmp_path, db_path):
    _history(tmp_path, db_path, slow_from=99, broken_from=99)
    assert main(["--db", str(db_path), "detect"]) == 0
    assert _alerts(db_path) == []


def test_short_history_is_not_scanned(tmp_path, db_path, capsys):
    _history(tmp_path, db_path, runs=4, slow_from=2, broken_from=99)
    assert main(["--db", str(db_path), "detect"]) == 0
    assert _alerts(db_path) == []
    assert "too short" in capsys.readouterr().out


def test_gpus_are_separate_series(tmp_path, db_path):
    _history(tmp_path, db_path, broken_from=99)
    _history(tmp_path, db_path, slow_from=99, broken_from=99, gpu="NVIDIA H100 80GB HBM3")
    assert main(["--db", str(db_path), "detect", "--gpu", "NVIDIA H100 80GB HBM3"]) == 0
    assert _alerts(db_path) == []
    assert main(["--db", str(db_path), "detect"]) == 0
    assert {a.gpu_name for a in _alerts(db_path)} == {"NVIDIA H200"}


def test_dry_run_records_nothing(tmp_path, db_path):
    _history(tmp_path, db_path)
    assert main(["--db", str(db_path), "detect", "--dry-run"]) == 0
    assert _alerts(db_path) == []
    assert main(["--db", str(db_path), "detect", "--fail-on-new"]) == 1


def test_lifecycle_through_the_cli(tmp_path, db_path, capsys):
    _history(tmp_path, db_path)
    main(["--db", str(db_path), "detect"])
    alert = next(a for a in _alerts(db_path) if a.kind == "correctness")
    capsys.readouterr()
    assert main(["--db", str(db_path), "alerts", "ack", str(alert.alert_id), "--note", "bisecting", "--by", "ana"]) == 0
    assert (
        main(["--db", str(db_path), "alerts", "resolve", str(alert.alert_id), "--note", "fixed in abc", "--by", "ben"])
        == 0
    )
    assert [(e.action, e.actor, e.note) for e in alert_events(parse_location(db_path), alert.alert_id)][1:] == [
        ("acknowledged", "ana", "bisecting"),
        ("resolved", "ben", "fixed in abc"),
    ]
    assert main(["--db", str(db_path), "alerts", "list", "--all", "--history"]) == 0
    out = capsys.readouterr().out
    assert "resolved" in out and "bisecting" in out
    # resolved is final: acknowledging again is refused with exit 2 and a clear message
    assert main(["--db", str(db_path), "alerts", "ack", str(alert.alert_id), "--note", "x", "--by", "c"]) == 2
    assert "cannot go from resolved to acknowledged" in capsys.readouterr().err
    assert main(["--db", str(db_path), "alerts", "resolve", "999999"]) == 2
    assert "no alert 999999" in capsys.readouterr().err


def test_ack_needs_a_note_and_an_actor(tmp_path, db_path):
    _history(tmp_path, db_path)
    main(["--db", str(db_path), "detect"])
    alert_id = _alerts(db_path)[0].alert_id
    with pytest.raises(AlertError, match="note"):
        acknowledge(parse_location(db_path), alert_id, "   ", "ana")
    with pytest.raises(AlertError, match="actor"):
        acknowledge(parse_location(db_path), alert_id, "ok", "")
    with pytest.raises(AlertError, match="unknown"):
        list_alerts(parse_location(db_path), {"statuses": ("bogus",)})
    assert {a.status for a in _alerts(db_path)} == {"open"}


def test_broken_thresholds_file_fails_before_touching_the_history(tmp_path, db_path, capsys):
    _history(tmp_path, db_path)
    with duckdb.connect(str(db_path), read_only=True) as con:
        before = con.execute("select count(*) from alerts").fetchone()
    bad = tmp_path / "bad.toml"
    bad.write_text("[default]\nmin_effect = 0.02\n")
    assert main(["--db", str(db_path), "detect", "--thresholds", str(bad)]) == 2
    assert "min_effect_reason" in capsys.readouterr().err
    with duckdb.connect(str(db_path), read_only=True) as con:
        after = con.execute("select count(*) from alerts").fetchone()
    assert before == after == (0,)


def test_acknowledging_while_another_process_ingests_loses_nothing(tmp_path, db_path):
    """DuckDB has one writer at a time: the ack waits for the lock (history.store.db retries), and both
    the ingest's runs and the acknowledgement end up in the file."""
    import subprocess
    import sys
    from pathlib import Path

    _history(tmp_path, db_path)
    main(["--db", str(db_path), "detect"])
    alert_id = _alerts(db_path)[0].alert_id
    more = [
        make_bundle(
            tmp_path / f"late-{i}",
            run_id=f"late-{i}",
            started_at=T0 + timedelta(days=2, hours=i),
            variants=("sdpa", "triton_fa2"),
            seed=50 + i,
        )
        for i in range(6)
    ]
    tests_dir = Path(__file__).resolve().parent
    code = (
        "import sys; from attnwatch.history.ingest.write import ingest_paths; "
        "from attnwatch.history.store.location import parse_location; "
        "[ingest_paths(parse_location(sys.argv[1]), [p]) for p in sys.argv[2:]]"
    )
    ingest = subprocess.Popen([sys.executable, "-c", code, str(db_path), *map(str, more)], cwd=tests_dir.parent)
    acknowledge(parse_location(db_path), alert_id, "looking into it", "ana")
    resolve(parse_location(db_path), alert_id, "fixed", "ana")
    assert ingest.wait(timeout=300) == 0
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("select count(*) from runs where run_id like 'late-%'").fetchone() == (6,)
    assert [e.action for e in alert_events(parse_location(db_path), alert_id)] == ["opened", "acknowledged", "resolved"]


def test_a_mistyped_history_path_is_an_error_not_a_new_database(tmp_path, capsys):
    missing = tmp_path / "nope" / "history.duckdb"
    assert main(["--db", str(missing), "detect"]) == 2
    assert main(["--db", str(missing), "alerts", "ack", "1", "--note", "x", "--by", "y"]) == 2
    assert main(["--db", str(missing), "alerts", "list"]) == 2
    assert "no history" in capsys.readouterr().err
    assert not missing.exists() and not missing.parent.exists()


def test_alerts_list_links_each_alert_to_its_trend(tmp_path, db_path, capsys):
    """Each alert links to the series it was found in: its GPU and its pool (here the host)."""
    _history(tmp_path, db_path)
    main(["--db", str(db_path), "detect"])
    capsys.readouterr()
    assert (
        main(
            [
                "--db",
                str(db_path),
                "alerts",
                "list",
                "--kind",
                "regression",
                "--dashboard-url",
                "https://perf.example.org",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    step = f"{STEP_AT:040x}"
    assert (
        f"plot: https://perf.example.org/trends?gpu=NVIDIA+H200&metric=median_us&variants=triton_fa2"
        f"&shapes=l4_mission&dtype=fp16&causal=0&host=gpu-runner-1&commits=..{step}"
    ) in out
    assert out.count("plot: https://perf.example.org/trends?") == len(
        [a for a in _alerts(db_path) if a.kind == "regression"]
    )


def test_a_step_with_a_new_kernel_configuration_says_so_apart_from_the_commit(tmp_path, db_path):
    """The autotuner's pick changed with the step: the alert names both configurations."""
    paths = []
    for i in range(16):
        paths.append(
            make_bundle(
                tmp_path / f"b{i}",
                run_id=f"run-{i}",
                commit_sha=f"{i:040x}",
                started_at=T0 + timedelta(hours=i),
                commit_date=T0 + timedelta(hours=i),
                variants=("sdpa", "triton_fa2"),
                seed=i,
                variant_scale={"triton_fa2": 1.06} if i >= STEP_AT else None,
                kernel_configs={"triton_fa2": "m64_n128_w4_s3" if i >= STEP_AT else "m64_n64_w4_s3"},
            )
        )
    ingest_paths(parse_location(db_path), paths)
    assert main(["--db", str(db_path), "detect"]) == 0
    steps = [a for a in _alerts(db_path) if a.kind == "regression"]
    assert steps and {a.commit_sha for a in steps} == {f"{STEP_AT:040x}"}
    for a in steps:
        assert a.config_change == "m64_n64_w4_s3 -> m64_n128_w4_s3"
        assert "autotuner chose m64_n128_w4_s3 instead of m64_n64_w4_s3" in a.detail


def test_a_step_on_the_same_configuration_names_none(tmp_path, db_path):
    _history(tmp_path, db_path, broken_from=99)
    assert main(["--db", str(db_path), "detect"]) == 0
    steps = [a for a in _alerts(db_path) if a.kind == "regression"]
    assert steps and all(a.config_change is None and "autotuner" not in a.detail for a in steps)
