"""A clone of this repository with empty commits on top, and the CLI run inside it: the real git
repository that compare's worktrees need (tests only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent


def clone_with_commits(tmp_path: Path, *messages: str) -> tuple[Path, Callable[..., str]]:
    """(clone, git): the clone at tmp_path/repo with one empty commit per message; git(*args) runs
    git there and returns its output."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(clone)], check=True)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(clone), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    for message in messages:
        git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "--quiet", "--allow-empty", "-m", message)
    return clone, git


def attnwatch(clone: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`attnwatch ARGS` in `clone`, this checkout's code (not the clone's) doing the work."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); "
            "from attnwatch.cli.main import main; sys.exit(main(sys.argv[1:]))",
            *args,
        ],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **(env or {})},
    )
