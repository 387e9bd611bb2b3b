"""Pinned baselines (history/analysis/baselines.toml): checked with one-line errors, used by
`attnwatch compare --baseline NAME` in a real git repository and by the dashboard's Compare page."""

from __future__ import annotations

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import load_report
from git_clone import REPO_ROOT, attnwatch, clone_with_commits
from attnwatch.history.analysis.baselines import REPO_BASELINES, BaselineError, find_baseline, load_baselines


def _file(tmp_path, text):
    path = tmp_path / "baselines.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_repository_file_loads():
    load_baselines(REPO_BASELINES)


@pytest.mark.parametrize(
    "text, field",
    [
        ('[[baseline]]\nname = "v1"\nreason = "r"\n', "exactly one of commit and run"),
        ('[[baseline]]\nname = "v1"\ncommit = "XYZ"\nreason = "r"\n', "baseline[0].commit"),
        ('[[baseline]]\nname = "v1"\ncommit = "abcdef0"\n', "baseline[0].reason"),
        ('[[baseline]]\nname = "v 1"\ncommit = "abcdef0"\nreason = "r"\n', "baseline[0].name"),
        (
            '[[baseline]]\nname = "v1"\nrun = "r1"\nreason = "r"\n[[baseline]]\nname = "v1"\nrun = "r2"\nreason = "r"\n',
            "pinned twice",
        ),
    ],
)
def test_bad_baselines_are_one_line_errors_naming_the_field(tmp_path, text, field):
    path = _file(tmp_path, text)
    with pytest.raises(BaselineError) as err:
        load_baselines(path)
    assert field in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_baseline_lists_the_pinned_ones(tmp_path):
    path = _file(tmp_path, '[[baseline]]\nname = "v1.2"\ncommit = "abcdef0"\nreason = "release"\n')
    assert find_baseline("v1.2", path).commit == "abcdef0"
    with pytest.raises(BaselineError, match="no baseline named 'v9'.*pinned: v1.2"):
        find_baseline("v9", path)


@pytest.mark.slow
def test_compare_measures_the_head_against_a_pinned_baseline(tmp_path, monkeypatch):
    """A clone of this repository with two more commits; the baseline pins the first of them,
    so the A/B base is that commit, not HEAD~1."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone, git = clone_with_commits(tmp_path, "release", "later work")
    pinned = git("rev-parse", "HEAD~1")
    rules = _file(tmp_path, f'[[baseline]]\nname = "v-test"\ncommit = "{pinned}"\nreason = "the release under test"\n')
    done = attnwatch(
        clone,
        "compare",
        "--baseline",
        "v-test",
        "--shapes",
        "cpu",
        "--variants",
        "sdpa",
        "--dtypes",
        "fp16",
        "--causal",
        "no",
        "--rounds",
        "1",
        "--no-correctness",
        "--out",
        str(tmp_path / "out"),
        env={"ATTNWATCH_BASELINES": str(rules)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(tmp_path / "out" / "compare.json")
    assert report.merge_base_sha == pinned and report.base_ref == "baseline v-test"
    assert f"vs pinned baseline v\\-test at `{pinned[:12]}`" in render_comment(report)


def test_base_and_baseline_together_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(
        "ATTNWATCH_BASELINES", str(_file(tmp_path, '[[baseline]]\nname = "v1"\ncommit = "abcdef0"\nreason = "r"\n'))
    )
    assert (
        main(["compare", "--baseline", "v1", "--base", "HEAD~1", "--shapes", "cpu", "--out", str(tmp_path / "o")]) == 2
    )
    assert "--baseline and --base" in capsys.readouterr().err
