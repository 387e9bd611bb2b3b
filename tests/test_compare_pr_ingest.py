"""End to end on this CPU: a real `attnwatch compare` of two commits, then `attnwatch ingest
--pull-request` of its --out directory, as the PR-comment workflow runs them: every round of
each side is stored as a pull-request run, the comment's dashboard link names runs that exist,
the head's runs record the measured head and the base's the merge base, and compare.json says
what the stored runs hold (its verdicts are computed from the same round bundles)."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.compare.report import load_report
from attnwatch.ci.integration.pr_runs import SourceRun, dashboard_link, run_id_for
from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import parse_location

pytestmark = pytest.mark.slow  # two measuring workers

REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = {"sdpa/cpu_tiny/fp16/noncausal", "torch_3op/cpu_tiny/fp16/noncausal"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _two_commits(root: Path) -> tuple[Path, str, str]:
    """A repository holding this checkout's kernels/: a base commit on main, a head commit on
    a branch, and main moved on after the branch point (so the merge base is neither tip)."""
    repo = root / "repo"
    shutil.copytree(REPO_ROOT / "kernels", repo / "kernels", ignore=shutil.ignore_patterns("__pycache__", ".*"))
    _git(root, "init", "--quiet", "--initial-branch=main", str(repo))
    _git(repo, "add", "kernels")
    _git(repo, "commit", "--quiet", "-m", "base")
    merge_base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", "-b", "feature")
    _git(repo, "commit", "--quiet", "--allow-empty", "-m", "head")
    head = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "--quiet", "main")
    _git(repo, "commit", "--quiet", "--allow-empty", "-m", "main moves on")
    return repo, merge_base, head


def test_a_real_compare_is_ingested_as_the_pull_request_runs_the_comment_links(tmp_path, db_path, capsys):
    repo, merge_base, head = _two_commits(tmp_path)
    out = tmp_path / "compare-out"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from attnwatch.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))",
            "compare",
            "--base",
            "main",
            "--head",
            "feature",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,torch_3op",
            "--dtypes",
            "fp16",
            "--causal",
            "no",
            "--min-rounds",
            "2",
            "--rounds",
            "2",
            "--out",
            str(out),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(out / "compare.json")
    assert (report.merge_base_sha, report.head_sha) == (merge_base, head)
    assert sorted(p.name for p in (out / "bundles").iterdir()) == [
        "base-round1",
        "base-round2",
        "head-round1",
        "head-round2",
    ]
    session = json.loads((out / "session.json").read_text())
    assert session["sides"]["head"]["bundles"] == ["bundles/head-round1", "bundles/head-round2"]

    ingest = [
        "--db",
        str(db_path),
        "ingest",
        "--pull-request",
        "7",
        "--head-sha",
        head,
        "--source-run",
        "123.1",
        str(out),
    ]
    assert main(ingest) == 0
    assert "4 run(s) inserted" in capsys.readouterr().out

    link = dashboard_link("https://dash.example.org", 7, SourceRun(123, 1), report.gpu_name)
    query = urllib.parse.parse_qs(urllib.parse.urlparse(link).query)
    with open_read(parse_location(db_path)) as con:
        runs = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT run_id, trigger, pr_number, branch, commit_sha, shape_set FROM runs"
            ).fetchall()
        }
        for side, sha in (("base", merge_base), ("head", head)):
            (run_id,) = query[side]
            assert runs[run_id] == ("pull_request", 7, "pull/7", sha, "cpu")
            assert run_id_for(7, SourceRun(123, 1), side, 2) in runs  # every round, not only the linked one
        results = con.execute("SELECT run_id, case_id, status, median_us FROM results").fetchall()
        samples = con.execute("SELECT run_id, case_id, latency_us FROM samples").fetchall()
        checked = con.execute("SELECT DISTINCT run_id, case_id FROM correctness").fetchall()
    assert len(runs) == 4
    assert {(r, c) for r, c, s, _ in results if s == "ok"} == {(r, c) for r in runs for c in CASES}
    # The correctness check runs once, in round 1, on the head alone (ci/compare/select.head_checks:
    # this checkout holds no shared harness, so every variant is measured and checked), stored
    # with the head's round-1 run.
    assert set(checked) == {(run_id_for(7, SourceRun(123, 1), "head", 1), c) for c in CASES}
    # compare.json's per-round medians are the medians of the samples stored for those rounds.
    for case in report.cases:
        for side in ("base", "head"):
            stored = [
                statistics.median(
                    v for r, c, v in samples if r == run_id_for(7, SourceRun(123, 1), side, k) and c == case.case_id
                )
                for k in (1, 2)
            ]
            assert getattr(case, side).round_medians_us == pytest.approx(stored, rel=1e-12)

    assert main(ingest) == 0  # the same artifact again: nothing new
    assert "0 run(s) inserted (0 result rows), 4 skipped" in capsys.readouterr().out
    with open_read(parse_location(db_path)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 4
