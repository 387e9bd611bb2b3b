"""Real git repositories holding a copy of what a source fingerprint reads of this checkout, for the
tests of `attnwatch affected` and of the workflow that runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("kernels", "ci", "history", "README.md", "pyproject.toml", "Makefile", ".github/workflows/gpu-bench.yml")
CUDA = {"cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync"}


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    """A repository whose `main` holds what a source fingerprint reads of this checkout."""
    repo = tmp_path_factory.mktemp("origin")
    for part in COPIED:
        source, target = ROOT / part, repo / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "main")
    return repo


@pytest.fixture
def clone(origin, tmp_path) -> Path:
    """A clone on a pull request's branch (origin/main is its base)."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(origin), str(repo)], check=True, timeout=120)
    git(repo, "checkout", "--quiet", "-b", "pr")
    return repo


def change(repo: Path, path: str, text: str) -> str:
    """Append `text` to `path` and commit; the new head SHA."""
    target = repo / path
    target.write_text(target.read_text() + text)
    git(repo, "commit", "--quiet", "-am", f"change {path}")
    return git(repo, "rev-parse", "HEAD")
