"""`attnwatch compare`: a flag the chosen mode would ignore is refused before any work.

`--pytest` measures a suite's own tests, so the variant flags (--variants, --ncu, ...) mean
nothing there; `--pytest-args` means nothing without it. Each used to be dropped silently, and
the user believed it applied. The base named here does not exist: a command that got past the
check would fail on it with another message, so each test fails without the check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.cli.main import main

REPO_ROOT = Path(__file__).resolve().parent.parent

# Every flag --pytest refuses, with a value (None: the flag takes none).
NOT_WITH_PYTEST = {
    "--shapes": "pr",
    "--variants": "sdpa",
    "--dtypes": "fp16",
    "--causal": "both",
    "--all": None,
    "--variant-module": "mymod",
    "--variant-path": "lib",
    "--min-rounds": "2",
    "--workers-per-side": "1",
    "--no-correctness": None,
    "--ncu": "changed",
    "--ncu-budget": "30",
    "--case-timeout": "60",
    "--base-root": ".",
    "--base-bundles": "b",
    "--head-bundles": "h",
}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository of one commit, the working directory."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _args(flag: str) -> list[str]:
    value = NOT_WITH_PYTEST[flag]
    return [flag] if value is None else [flag, value]


@pytest.mark.parametrize("flag", sorted(NOT_WITH_PYTEST))
def test_a_variant_flag_given_with_pytest_is_refused(repo, capsys, flag):
    rc = main(["compare", "--pytest", "bench", "--base", "nosuchref", "--out", "out", *_args(flag)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"attnwatch compare: error: {flag} does not apply with --pytest, which "), err
    assert not (repo / "out").exists()


def test_the_refusal_names_every_flag_and_what_pytest_selects_with(repo):
    """Through the real CLI in a subprocess: one line on stderr, exit 2, nothing written."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--pytest",
            "bench",
            "--base",
            "nosuchref",
            "--variants",
            "sdpa",
            "--causal",
            "no",
            "--ncu-budget",
            "5",
            "--out",
            "out",
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "attnwatch compare: error: --variants, --causal, --ncu-budget do not apply with --pytest, which measures the "
        "suite's own tests (choose them with --pytest-args, e.g. '-k softmax', or a node id as PATH); runs no ncu pass"
    ]
    assert not (repo / "out").exists()


def test_defaults_and_ncu_off_pass_the_check(repo, capsys):
    """Defaulted flags are not "given"; `--ncu off` asks for what --pytest does anyway (the
    action and the adopt example pass it). Both get as far as the revision."""
    for extra in ([], ["--ncu", "off"]):
        assert main(["compare", "--pytest", "bench", "--base", "nosuchref", "--out", "out", *extra]) == 2
        assert capsys.readouterr().err.strip() == "attnwatch compare: error: no such commit or ref: nosuchref"


def test_pytest_args_without_pytest_is_refused(repo, capsys):
    rc = main(["compare", "--base", "nosuchref", "--pytest-args", "-k softmax", "--out", "out"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [
        "attnwatch compare: error: --pytest-args applies only with --pytest PATH (without it, the registry's "
        "variants are measured: choose them with --variants, --shapes, --dtypes, --causal)"
    ]
    assert not (repo / "out").exists()
