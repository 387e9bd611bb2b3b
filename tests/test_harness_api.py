"""The harness API of kernels/ (kernels/harness_api.py, ci/kernels_api.py): today's harness
measures a base revision's kernels through it, a base without it is version 0, and a base
whose version this harness does not measure is refused in one line before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnwatch.ci.kernels_api as kernels_api_module
from attnwatch.cli.main import main
from attnwatch.ci.compare.report import load_report
from attnwatch.ci.kernels_api import (
    NAMES,
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    HarnessApiError,
    _version_0,
    declared_version,
    kernels_api,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
# main before the harness API existed: its kernels/ have no harness_api.py (version 0).
BEFORE_THE_API = "1091bb491f572e16083cd9ea127b96088f7ab27d"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _fake_kernels(root: Path, api_source: str | None) -> Path:
    """A checkout holding a `kernels` package whose harness_api.py is `api_source` (None: none)."""
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text("")
    if api_source is not None:
        (root / "kernels" / "harness_api.py").write_text(api_source)
    return root


def test_this_checkout_declares_the_newest_version_this_harness_knows():
    """Bumping kernels' version without teaching ci/kernels_api.py about it fails here."""
    from attnwatch.kernels import harness_api

    assert declared_version(REPO_ROOT) == harness_api.HARNESS_API_VERSION == NEWEST_KNOWN
    assert kernels_api() is harness_api
    assert set(NAMES) <= set(harness_api.__all__)


def test_version_0_finds_the_same_names_module_by_module():
    from attnwatch.kernels import harness_api

    old = _version_0()
    assert old.HARNESS_API_VERSION == 0
    assert {name: getattr(old, name) for name in NAMES if name != "forget_tuned_choices"} == {
        name: getattr(harness_api, name) for name in NAMES if name != "forget_tuned_choices"
    }


def test_version_0_forgets_tuned_choices_through_the_tuner_itself(monkeypatch):
    import types

    forgotten = []
    tuner = types.ModuleType("attnwatch.kernels.triton.tuner")
    tuner.forget_choices = lambda: forgotten.append(True)
    monkeypatch.setitem(sys.modules, "attnwatch.kernels.triton.tuner", tuner)
    _version_0().forget_tuned_choices()
    assert forgotten == [True]


@pytest.mark.parametrize(
    "source, problem",
    [
        ('HARNESS_API_VERSION = "2"\n', "HARNESS_API_VERSION: expected a non-negative int literal"),
        ("VERSION = 2\n", "HARNESS_API_VERSION: missing"),
        ("HARNESS_API_VERSION = (\n", "not valid Python"),
    ],
)
def test_a_version_that_cannot_be_read_is_named_with_its_file(tmp_path, source, problem):
    with pytest.raises(HarnessApiError, match="^kernels/harness_api.py: ") as raised:
        declared_version(_fake_kernels(tmp_path, source))
    assert problem in str(raised.value)


def test_a_base_newer_than_this_harness_is_refused_naming_its_commit_and_nothing_is_written(
    tmp_path, monkeypatch, capsys
):
    """Through the PR check's own path (--base: a git worktree of the merge base)."""
    repo = _fake_kernels(tmp_path / "repo", "HARNESS_API_VERSION = 7\n")
    _git(repo, "init", "--quiet")
    _git(repo, "add", ".")
    commit = ("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "--quiet", "--allow-empty", "-m")
    _git(repo, *commit, "base")
    _git(repo, *commit, "head")
    base = _git(repo, "rev-parse", "HEAD~1")
    monkeypatch.chdir(repo)
    out = tmp_path / "out"
    assert main(["compare", "--base", "HEAD~1", "--head", "HEAD", "--shapes", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnwatch compare: error: cannot measure the base {base[:12]}: its kernels declare harness API "
        f"version 7, newer than this attnwatch's {NEWEST_KNOWN}; measure it with an attnwatch that knows it"
    )
    assert not out.exists()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1  # the temporary checkouts are gone


def test_a_base_older_than_the_oldest_supported_is_refused(tmp_path, monkeypatch, capsys):
    """The day version 0 is no longer measured, a base without the module is refused, not guessed at."""
    monkeypatch.setattr(kernels_api_module, "OLDEST_SUPPORTED", 1)
    export = _fake_kernels(tmp_path / "export", None)
    out = tmp_path / "out"
    assert (
        main(["compare", "--base-root", str(export), "--base", "v0-export", "--shapes", "cpu", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"attnwatch compare: error: cannot measure the base v0-export: its kernels declare harness API "
        f"version 0, older than 1, the oldest this attnwatch (version {NEWEST_KNOWN}) measures"
    )
    assert str(tmp_path) not in err and not out.exists()


def test_a_measuring_process_refuses_a_version_it_does_not_know(tmp_path):
    """The worker's own check (were the parent's skipped): a clear error at start-up, no guessing."""
    from attnwatch.ci.child_env import child_env

    base = _fake_kernels(tmp_path / "base", "HARNESS_API_VERSION = 7\n")
    env = child_env(tmp_path / "work", base)
    done = subprocess.run(
        [sys.executable, "-c", "from attnwatch.ci.kernels_api import kernels_api; kernels_api()"],
        cwd=tmp_path / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert (
        f"HarnessApiError: kernels/harness_api.py: HARNESS_API_VERSION 7: this harness uses versions "
        f"{OLDEST_SUPPORTED}..{NEWEST_KNOWN}"
    ) in done.stderr


def test_a_work_folder_used_before_links_the_new_checkout(tmp_path):
    """A work folder whose `kernels` link names an earlier checkout, since removed, is pointed at
    the new one (the link used to be kept, and its creation failed on the dangling name)."""
    import shutil

    from attnwatch.ci.child_env import child_env

    first, second = _fake_kernels(tmp_path / "first", None), _fake_kernels(tmp_path / "second", None)
    child_env(tmp_path / "work", first)
    shutil.rmtree(first)
    env = child_env(tmp_path / "work", second)
    link = tmp_path / "work" / "kernels-shim" / "kernels"
    assert link.resolve() == (second / "kernels").resolve()
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(link.parent)


def _tree_before_the_api(tmp_path: Path) -> Path:
    """A git worktree of BEFORE_THE_API, added to a clone that borrows this repository's objects
    (so this repository's own worktree list is left alone)."""
    if _git_ok(REPO_ROOT, "cat-file", "-e", f"{BEFORE_THE_API}^{{commit}}"):
        clone = tmp_path / "repo"
        _git(REPO_ROOT, "clone", "--quiet", "--shared", "--no-checkout", str(REPO_ROOT), str(clone))
        _git(clone, "worktree", "add", "--detach", "--quiet", str(tmp_path / "base"), BEFORE_THE_API)
        return tmp_path / "base"
    shallow = _git_ok(REPO_ROOT, "rev-parse", "--is-shallow-repository", want="true")
    pytest.fail(
        f"commit {BEFORE_THE_API[:12]} (main before the harness API) is not in this checkout"
        f"{' (a shallow clone)' if shallow else ''}: this test needs the repository's history "
        "(git fetch --unshallow; in GitHub Actions, actions/checkout with fetch-depth: 0)"
    )


def _git_ok(repo: Path, *args: str, want: str | None = None) -> bool:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    return done.returncode == 0 and (want is None or done.stdout.strip() == want)


@pytest.mark.slow
def test_todays_harness_measures_the_kernels_of_a_commit_from_before_the_api(tmp_path):
    """A real CPU compare, correctness included: this checkout's ci/ and kernels/ (version
    NEWEST_KNOWN) against a git worktree of main before kernels/harness_api.py (version 0)."""
    base = _tree_before_the_api(tmp_path)
    assert not (base / "kernels" / "harness_api.py").exists()
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--base-root",
            str(base),
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
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = load_report(out / "compare.json")
    assert report.base_sha == BEFORE_THE_API
    assert [c.case_id for c in report.cases] == ["sdpa/cpu_tiny/fp16/noncausal"]
    for case in report.cases:
        assert case.base.status == case.head.status == "ok" and case.ratio, case
        assert not case.correctness_failed
    session = json.loads((out / "session.json").read_text())
    sides = session["sides"]
    assert {name: s["harness_api_version"] for name, s in sides.items()} == {"base": 0, "head": NEWEST_KNOWN}
    assert sides["base"]["kernels_path"] == str((base / "kernels").resolve())
    assert sides["head"]["kernels_path"] == str((REPO_ROOT / "kernels").resolve())
    checks = [json.loads((out / p / "correctness.json").read_text()) for p in sides["base"]["bundles"]]
    assert checks and all(r["passed"] for c in checks for r in c["records"])  # the old check_case, run for real
