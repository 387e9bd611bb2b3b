"""A pull request's compare rounds stored as pull-request runs (ci/integration/pr_runs.py,
history/contract/pull_request_runs.py, `attnwatch ingest --pull-request`), on real DuckDB files: the labels
come from the trusted caller, never from the PR-written manifests, and the comment's dashboard
link opens exactly the runs that were stored."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.ci.integration.pr_runs import SourceRun, dashboard_link, run_id_for
from attnwatch.history.store.db import open_read
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

HEAD = "c" * 40
MERGE_BASE = "b" * 40
ENTRYPOINT = Path(__file__).resolve().parent.parent / "app" / "streamlit_app.py"


def _compare_out(root: Path, rounds: int = 2, head_commit: str = HEAD, **forged) -> Path:
    """What `attnwatch compare --out root` leaves: round bundles whose manifests the PR wrote.

    By default they claim what a hostile PR would: branch main, the run id of the main run, and
    a commit message and date of their choosing."""
    claims = dict(
        branch="main",
        trigger="compare",
        run_id="main-0",
        commit_message="Forged: merged to main",
        variants=("sdpa", "triton_fa2"),
    )
    claims.update(forged)
    for r in range(1, rounds + 1):
        for side, sha in (("base", MERGE_BASE), ("head", head_commit)):
            make_bundle(root / "bundles" / f"{side}-round{r}", commit_sha=sha, seed=10 * r + (side == "head"), **claims)
    return root


def _ingest_pr(db, out: Path, pr=12, sha=HEAD, source="777.1") -> int:
    return cli_main(
        ["--db", str(db), "ingest", "--pull-request", str(pr), "--head-sha", sha, "--source-run", source, str(out)]
    )


@pytest.fixture
def with_main(tmp_path, db_path):
    ingest_paths(
        parse_location(db_path),
        [
            make_bundle(
                tmp_path / "main",
                run_id="main-0",
                commit_sha="a" * 40,
                commit_message="Tune tiles",
                variants=("sdpa", "triton_fa2"),
            )
        ],
    )
    return db_path


def test_compare_rounds_become_pull_request_runs_whatever_their_manifests_say(tmp_path, with_main, capsys):
    out = _compare_out(tmp_path / "compare")
    assert _ingest_pr(with_main, out) == 0
    assert "4 run(s) inserted" in capsys.readouterr().out
    with open_read(parse_location(with_main)) as con:
        runs = con.execute("SELECT run_id, trigger, pr_number, branch, commit_sha FROM runs ORDER BY run_id").fetchall()
        series_runs = {r for (r,) in con.execute("SELECT DISTINCT run_id FROM case_series").fetchall()}
        latest = [r for (r,) in con.execute("SELECT run_id FROM latest_main_runs").fetchall()]
        commits = con.execute("SELECT sha, message FROM commits").fetchall()
    assert runs == [
        ("main-0", "push", None, "main", "a" * 40),
        ("pr12-run777.1-base-round1", "pull_request", 12, "pull/12", MERGE_BASE),
        ("pr12-run777.1-base-round2", "pull_request", 12, "pull/12", MERGE_BASE),
        ("pr12-run777.1-head-round1", "pull_request", 12, "pull/12", HEAD),
        ("pr12-run777.1-head-round2", "pull_request", 12, "pull/12", HEAD),
    ]
    assert series_runs == {"main-0"} and latest == ["main-0"]  # nothing of the PR reaches main's series
    assert commits == [("a" * 40, "Tune tiles")]  # no commit metadata from PR-written manifests


def test_reingest_is_a_no_op_and_a_new_attempt_gets_new_runs(tmp_path, with_main, capsys):
    out = _compare_out(tmp_path / "compare", rounds=1)
    assert _ingest_pr(with_main, out) == 0
    assert _ingest_pr(with_main, out) == 0
    assert "0 run(s) inserted (0 result rows), 2 skipped" in capsys.readouterr().out
    assert _ingest_pr(with_main, _compare_out(tmp_path / "rerun", rounds=1), source="777.2") == 0
    with open_read(parse_location(with_main)) as con:
        assert con.execute("SELECT count(*) FROM runs WHERE pr_number = 12").fetchone()[0] == 4


def test_a_head_round_of_another_commit_is_refused_and_nothing_is_written(tmp_path, with_main, capsys):
    out = _compare_out(tmp_path / "compare", head_commit="d" * 40)
    assert _ingest_pr(with_main, out) == 2
    err = capsys.readouterr().err
    assert "head-round1" in err and "commit_sha" in err and "not the measured head" in err
    with open_read(parse_location(with_main)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


@pytest.mark.parametrize("setting", [None, "example/attention-kernels"])
def test_rounds_of_another_repository_are_refused_and_nothing_is_written(
    tmp_path, with_main, capsys, monkeypatch, setting
):
    """A PR's bundles say which repository they measured; another one's never joins this history."""
    monkeypatch.delenv("ATTNWATCH_REPO", raising=False)
    if setting:
        monkeypatch.setenv("ATTNWATCH_REPO", setting)
    out = _compare_out(tmp_path / "compare", rounds=1, repo="evil/other-repo")
    assert _ingest_pr(with_main, out) == 2
    err = capsys.readouterr().err.strip()
    assert "manifest.json: repo: 'evil/other-repo' is not this history's repository 'example/attention-kernels'" in err
    assert len(err.splitlines()) == 1
    with open_read(parse_location(with_main)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert _ingest_pr(with_main, _compare_out(tmp_path / "genuine", rounds=1)) == 0


@pytest.mark.parametrize(
    "name", ["evil", "head-round0", "main-round1", "head-round2 (a file)", "head-round3 (a symlink)"]
)
def test_anything_but_round_directories_is_refused(tmp_path, with_main, capsys, name):
    out = _compare_out(tmp_path / "compare", rounds=1)
    entry = out / "bundles" / name.split(" ")[0]
    if "file" in name:
        entry.write_text("{}")
    elif "symlink" in name:
        entry.symlink_to(out / "bundles" / "head-round1")
    else:
        entry.mkdir()
    assert _ingest_pr(with_main, out) == 2
    assert "not a round bundle directory" in capsys.readouterr().err


def test_a_bundles_folder_that_is_a_symbolic_link_is_refused(tmp_path, with_main, capsys):
    elsewhere = _compare_out(tmp_path / "elsewhere", rounds=1)
    out = tmp_path / "compare"
    out.mkdir()
    (out / "bundles").symlink_to(elsewhere / "bundles", target_is_directory=True)
    assert _ingest_pr(with_main, out) == 2
    assert "no bundles directory" in capsys.readouterr().err
    with open_read(parse_location(with_main)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_a_round_holding_a_symbolic_link_is_refused(tmp_path, with_main, capsys):
    out = _compare_out(tmp_path / "compare", rounds=1)
    (out / "bundles" / "head-round1" / "extra_dir").symlink_to("/etc", target_is_directory=True)
    assert _ingest_pr(with_main, out) == 2
    assert "extra_dir: file: is a symbolic link" in capsys.readouterr().err
    with open_read(parse_location(with_main)) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


@pytest.mark.parametrize("bound", ["max_rounds_per_side", "max_entries", "max_total_bytes"])
def test_an_artifact_past_the_bounds_is_refused_before_reading(tmp_path, with_main, capsys, monkeypatch, bound):
    """The bounds are data (ci/integration/pr_ingest_limits.toml); here lowered so that 2 rounds pass them."""
    from attnwatch.ci.integration import pr_runs

    out = _compare_out(tmp_path / "compare", rounds=2)
    size = sum(f.stat().st_size for f in (out / "bundles").rglob("*") if f.is_file())
    entries = sum(1 for _ in (out / "bundles").rglob("*"))
    limits = dict(pr_runs.ingest_limits())
    limits[bound] = {"max_rounds_per_side": 1, "max_entries": entries - 1, "max_total_bytes": size - 1}[bound]
    monkeypatch.setattr(pr_runs, "ingest_limits", lambda: limits)
    assert _ingest_pr(with_main, out) == 2
    err = capsys.readouterr().err.strip()
    assert "past what a pull-request ingest takes (pr_ingest_limits.toml); nothing was ingested" in err
    assert len(err.splitlines()) == 1
    limits[bound] += 1  # exactly at the bound: taken
    assert _ingest_pr(with_main, out) == 0


def test_the_shipped_bounds_take_what_compare_writes():
    from attnwatch.ci.integration.pr_runs import ingest_limits
    from attnwatch.ci.run_config import compare_setting

    limits = ingest_limits()
    assert limits["max_rounds_per_side"] >= 4 * compare_setting("max_rounds")
    assert limits["max_entries"] >= 2 * limits["max_rounds_per_side"] * 9


def test_bad_pull_request_arguments_are_refused(tmp_path, with_main, capsys):
    out = _compare_out(tmp_path / "compare", rounds=1)
    assert _ingest_pr(with_main, out, sha="HEAD") == 2
    assert "--head-sha" in capsys.readouterr().err
    assert _ingest_pr(with_main, out, source="12;rm") == 2
    assert "--source-run" in capsys.readouterr().err
    assert cli_main(["--db", str(with_main), "ingest", "--pull-request", "12", str(out)]) == 2
    assert "go together" in capsys.readouterr().err


def test_the_comment_link_opens_the_stored_runs_on_the_compare_page(tmp_path, with_main, monkeypatch):
    source = SourceRun(777, 1)
    assert _ingest_pr(with_main, _compare_out(tmp_path / "compare"), source="777.1") == 0
    link = urllib.parse.urlsplit(dashboard_link("https://dash.example.org/", 12, source, "NVIDIA H200"))
    assert link.path == "/compare"  # Streamlit's URL of app/views/compare.py (the file's stem)
    query = dict(urllib.parse.parse_qsl(link.query))
    assert query == {
        "base": run_id_for(12, source, "base", 1),
        "head": run_id_for(12, source, "head", 1),
        "gpu": "NVIDIA H200",
    }
    monkeypatch.setenv("ATTNWATCH_DB", str(with_main))
    at = AppTest.from_file(str(ENTRYPOINT), default_timeout=120)
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("views/compare.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="compare_base_runs").value == "pr12-run777.1-base-round1"
    assert at.selectbox(key="compare_head_runs").value == "pr12-run777.1-head-round1"
