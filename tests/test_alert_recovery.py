"""An alert resolves itself once its series stays within min_effect for resolve_after runs
(history/analysis/thresholds.toml), with the event recorded; case rules (ignore, per-case min effect)
apply to detect. Real bundles, a real DuckDB history, the real CLI."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bundle_factory import make_bundle
from attnwatch.cli.main import main
from attnwatch.history.detection.alerts import alert_events, list_alerts, resolve
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
STEP_AT = 10


def _runs(tmp_path, db_path, start, stop, slow=lambda i: STEP_AT <= i):
    paths = [
        make_bundle(
            tmp_path / f"bundle-{i}",
            run_id=f"run-{i}",
            commit_sha=f"{i:040x}",
            started_at=T0 + timedelta(hours=i),
            commit_date=T0 + timedelta(hours=i),
            gpu_name="NVIDIA H200",
            variants=("sdpa", "triton_fa2"),
            variant_scale={"triton_fa2": 1.06} if slow(i) else None,
            seed=i,
        )
        for i in range(start, stop)
    ]
    ingest_paths(parse_location(db_path), paths)


def _steps(db_path):
    return [a for a in list_alerts(parse_location(db_path), {"limit": 1000}) if a.kind == "regression"]


def test_an_alert_resolves_itself_after_k_runs_back_and_records_the_event(tmp_path, db_path, capsys):
    k = load_thresholds("NVIDIA H200").resolve_after
    back_from = 16
    fixed = lambda i: STEP_AT <= i < back_from  # noqa: E731
    _runs(tmp_path, db_path, 0, back_from + k - 1, fixed)  # one run short of k back at the old level
    assert main(["--db", str(db_path), "detect"]) == 0
    opened = _steps(db_path)
    assert opened and {a.status for a in opened} == {"open"}
    _runs(tmp_path, db_path, back_from + k - 1, back_from + k, fixed)  # the k-th run back
    assert main(["--db", str(db_path), "detect", "--dry-run", "--gpu", "NVIDIA H100"]) == 0
    assert "0 alerts would resolve" in capsys.readouterr().out  # another GPU's alerts are left alone
    assert main(["--db", str(db_path), "detect", "--dry-run", "--gpu", "NVIDIA H200"]) == 0
    assert f"{len(opened)} alerts would resolve" in capsys.readouterr().out
    assert {a.status for a in _steps(db_path)} == {"open"}
    assert main(["--db", str(db_path), "detect"]) == 0
    assert f"{len(opened)} alerts resolved" in capsys.readouterr().out
    for a in _steps(db_path):
        assert a.status == "resolved" and a.actor == "attnwatch detect"
        events = alert_events(parse_location(db_path), a.alert_id)
        assert [e.action for e in events] == ["opened", "resolved"]
        assert events[-1].note.startswith(f"resolved automatically: the last {k} main runs")
    assert main(["--db", str(db_path), "detect"]) == 0  # nothing twice
    assert all(len(alert_events(parse_location(db_path), a.alert_id)) == 2 for a in _steps(db_path))


def test_a_series_still_slow_or_a_human_resolution_is_left_alone(tmp_path, db_path):
    _runs(tmp_path, db_path, 0, 20)  # slow from run 10 to the end
    main(["--db", str(db_path), "detect"])
    main(["--db", str(db_path), "detect"])
    alerts = _steps(db_path)
    assert alerts and {a.status for a in alerts} == {"open"}
    resolve(parse_location(db_path), alerts[0].alert_id, "accepted", "kernel-lead")
    main(["--db", str(db_path), "detect"])
    assert [e.actor for e in alert_events(parse_location(db_path), alerts[0].alert_id)] == [
        "attnwatch detect",
        "kernel-lead",
    ]


def test_detect_obeys_case_rules(tmp_path, db_path, monkeypatch, capsys):
    _runs(tmp_path, db_path, 0, 16)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[ignore]]\ncase = "triton_fa2/*"\nreason = "test: known"\nexpires = 2999-01-01\n')
    assert main(["--db", str(db_path), "detect", "--case-rules", str(rules)]) == 0
    assert _steps(db_path) == [] and "more on ignored cases" in capsys.readouterr().out
    rules.write_text('[[min_effect]]\ncase = "triton_fa2/*"\nmin_effect = 0.10\nreason = "test: needs 10%"\n')
    monkeypatch.setenv("ATTNWATCH_CASE_RULES", str(rules))
    assert main(["--db", str(db_path), "detect"]) == 0
    assert _steps(db_path) == []  # a 6% step under the case's own 10%
    monkeypatch.delenv("ATTNWATCH_CASE_RULES")
    assert main(["--db", str(db_path), "detect"]) == 0
    assert _steps(db_path)
