"""`attnwatch bisect` for real on this CPU (a scratch history with a planted step, through
scripts/bisect_check.py, which runs the command), and its alert side: the range an alert
names, the outcome recorded on it, the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from attnwatch.history.detection.alerts import alert_events, AlertError, NewAlert, list_alerts, record_alerts
from attnwatch.history.detection.bisects import alert_target, record_bisect
from attnwatch.cli.main import main
from attnwatch.history.store.db import open_read, open_write
from commit_axis_history import REGRESSED_VARIANT, STEP_RUN, build_commit_axis_history, commit_sha
from attnwatch.history.store.location import parse_location

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bisect_check.py"


@pytest.mark.slow
def test_bisect_names_the_planted_commit_of_a_scratch_history(tmp_path):
    """6 commits after the good one, the 3rd plants torch_3op's call 3x slower (the spin
    calibrated, then checked by one compare): the bisect must name it, measuring at most
    1 + ceil(log2 6) = 4 revisions (about two minutes on a 2-core CPU)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--commits",
            "6",
            "--plant-at",
            "3",
            "--slowdown",
            "2",
            "--rounds",
            "3",
            "--no-correctness",
            "--calibration-compares",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads((out / "bisect_check.json").read_text())
    assert done.returncode == 0 and report["rc"] == 0, done.stdout[-2000:] + (out / "bisect.stderr").read_text()[-3000:]
    assert report["outcome"] == "found" and report["culprit"] == report["planted"]
    assert report["revisions_measured"] <= report["bound"] == 4
    # the spin was calibrated in this process, then checked by one compare of good against the plant
    calibration = report["calibration"]
    assert calibration["in_process"]["spin"] > 0 and len(calibration["compares"]) == 1
    assert calibration["realized_by"] == "compare 1" and calibration["realized"] > 0.5
    assert calibration["compares"][0]["ratio"] == pytest.approx(1 + calibration["realized"])
    printed = (out / "bisect.stdout").read_text()
    assert (
        f'found {report["planted"][:12]} "torch_3op: planted slowdown of 200%": '
        "torch_3op/cpu_tiny/fp16/noncausal x" in printed
    )
    assert "revisions measured" in printed and "wall time" in printed
    assert sorted(f.name for f in out.iterdir()) == [  # flat: what a GPU call brings back
        "bisect.json",
        "bisect.stderr",
        "bisect.stdout",
        "bisect_check.json",
        "bundles.tar.gz",
    ]
    result = json.loads((out / "bisect.json").read_text())
    planted_at = result["commits"].index(report["planted"])
    assert result["range"] == [result["commits"][planted_at - 1], report["planted"]]  # the step, proved both sides
    probes = {p["sha"]: p["state"] for p in result["probes"]}
    assert probes[report["bad"]] == probes[report["planted"]] == "slow"
    # every compare left its round bundles, measured against the good revision
    with tarfile.open(out / "bundles.tar.gz") as tar:
        sessions = {name: json.load(tar.extractfile(name)) for name in tar.getnames() if name.endswith("/session.json")}
    assert any(name.startswith("./calibration/0/") for name in sessions)
    for probe in result["probes"]:
        session = sessions[f"./bisect/{probe['out']}/session.json"]
        assert session["sides"]["base"]["commit_sha"] == report["good"]
        assert session["sides"]["head"]["commit_sha"] == probe["sha"]


def _alert_db(tmp_path) -> tuple[Path, int]:
    db = build_commit_axis_history(tmp_path / "h.duckdb", tmp_path / "bundles")
    (alert,) = [
        a
        for a in list_alerts(parse_location(db))
        if a.case_id.startswith(REGRESSED_VARIANT) and a.metric == "median_us"
    ][:1]
    return db, alert.alert_id


def test_an_alert_names_its_case_and_the_commits_of_its_step(tmp_path):
    db, alert_id = _alert_db(tmp_path)
    target = alert_target(parse_location(db), alert_id)
    assert (target.good_sha, target.bad_sha) == (commit_sha(STEP_RUN - 1), commit_sha(STEP_RUN))
    assert target.case_id.startswith(REGRESSED_VARIANT) and target.gpu_name == "NVIDIA H200"

    assert record_bisect(
        parse_location(db), alert_id, commit_sha(STEP_RUN), "found it: x1.150 [1.12, 1.18]\nsecond line"
    )
    events = alert_events(parse_location(db), alert_id)  # the culprit is also the alert's 'bisected' transition
    assert (events[-1].action, events[-1].actor) == ("bisected", "attnwatch bisect")
    assert events[-1].note.startswith(f"bisected to {commit_sha(STEP_RUN)}: found it")
    with open_read(parse_location(db)) as con:
        row = con.execute(
            "SELECT culprit_sha, bisect_result, bisected_at IS NOT NULL FROM alerts WHERE alert_id = ?", [alert_id]
        ).fetchone()
    assert row == (commit_sha(STEP_RUN), "found it: x1.150 [1.12, 1.18] second line", True)
    assert not record_bisect(
        parse_location(db), alert_id, None, "undecided between a and b"
    )  # a later bisect replaces the outcome
    assert len(alert_events(parse_location(db), alert_id)) == len(events)  # and, naming no commit, is no transition
    with open_read(parse_location(db)) as con:
        assert con.execute(
            "SELECT culprit_sha, bisect_result FROM alerts WHERE alert_id = ?", [alert_id]
        ).fetchone() == (None, "undecided between a and b")
    with pytest.raises(AlertError, match="no alert 999"):
        record_bisect(parse_location(db), 999, None, "x")


def test_bisect_refuses_an_alert_of_another_gpu_and_bad_arguments(tmp_path, capsys):
    db, alert_id = _alert_db(tmp_path)
    assert main(["--db", str(db), "bisect", "--alert", str(alert_id), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnwatch bisect: error: alert {alert_id} is on NVIDIA H200, this machine has cpu: "
        "bisect it there (or pass --any-gpu)"
    )
    assert main(["--db", str(db), "bisect", "--alert", str(alert_id), "--good", "HEAD"]) == 2
    assert "no --good/--bad/--case with it" in capsys.readouterr().err
    assert main(["--db", str(db), "bisect", "--good", "HEAD~1", "--bad", "HEAD"]) == 2
    assert "needs --alert ID, or --good, --bad and at least one --case" in capsys.readouterr().err
    assert main(["--db", str(db), "bisect", "--good", "HEAD~1", "--bad", "HEAD", "--case", "sdpa/nowhere"]) == 2
    assert "--case: not a case id" in capsys.readouterr().err
    assert main(["--db", str(db), "bisect", "--alert", "999"]) == 2
    assert "no alert 999" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # a refusal measures and writes nothing


def test_a_range_outside_the_given_branch_or_backwards_is_refused(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*a):
        return subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *a],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "--quiet", "-b", "main")
    for i in range(3):
        (repo / "f").write_text(str(i))
        git("add", "f")
        git("commit", "--quiet", "-m", f"c{i}")
    git("checkout", "--quiet", "-b", "side")
    git("commit", "--quiet", "--allow-empty", "-m", "on a side branch")
    case = ["--case", "torch_3op/cpu_tiny/fp16/noncausal", "--checkout", str(repo), "--out", str(tmp_path / "o")]
    assert main(["bisect", "--good", "main~2", "--bad", "side", "--within", "main", *case]) == 2
    assert "is not reachable from --within" in capsys.readouterr().err
    assert main(["bisect", "--good", "main", "--bad", "main~2", *case]) == 2
    assert "is not an ancestor of --bad" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_only_a_regression_alert_is_bisected(tmp_path):
    db, alert_id = _alert_db(tmp_path)
    with open_write(parse_location(db)) as con:
        (faster,), _ = record_alerts(
            con,
            [
                NewAlert(
                    "test|faster",
                    "improvement",
                    "median_us",
                    "sdpa/x/fp16/causal",
                    "NVIDIA H200",
                    None,
                    commit_sha(3),
                    2.0,
                    1.0,
                    -50.0,
                )
            ],
        )
    with pytest.raises(
        AlertError, match=f"alert {faster}: an alert of kind improvement; bisect looks for the commit of a slowdown"
    ):
        alert_target(parse_location(db), faster)
    assert alert_target(parse_location(db), alert_id).bad_sha == commit_sha(STEP_RUN)
