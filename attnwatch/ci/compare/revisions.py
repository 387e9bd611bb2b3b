"""Git plumbing for compare: resolve revisions, find the merge base, check one out beside us;
and `CompareSide`, one side of an A/B as compare and bisect hand it to the session.

The base's kernels come from a `git worktree` of the merge base (a second checkout sharing
this repository's objects), so the head's `ci`/`history` code measures both sides alike.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from attnwatch.ci.errors import UserError
from attnwatch.history.contract.bundle import UNKNOWN_COMMIT
from attnwatch.history.temp_dirs import owned_temp_dir


@dataclass(frozen=True)
class CompareSide:
    """One side of an A/B: its `role` ("base" or "head"), the `commit` its round bundles record (a
    SHA, or "unknown" where git cannot tell), the checkout `root` whose kernels it measures (None:
    this checkout), and the `revision` the user named it by (a ref, a label; None: not named)."""

    role: str
    commit: str
    root: Path | None = None
    revision: str | None = None

    def label(self) -> str:
        """How a refusal names the side: its commit, else the revision or label the user gave."""
        if self.commit != UNKNOWN_COMMIT:
            return self.commit[:12]
        return (self.revision or "checkout")[:100]


def roots_of(sides: Iterable[CompareSide]) -> dict[str, Path | None]:
    """Each side's checkout by role (None: this checkout)."""
    return {side.role: side.root for side in sides}


def _run_git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UserError("git is not installed; compare needs it to check out the merge base") from None


def _git(repo: Path, *args: str) -> str:
    done = _run_git(repo, *args)
    if done.returncode != 0:
        raise UserError(f"git {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}"[:500])
    return done.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """Full SHA of a revision (branch, tag, SHA); a clear error for an unknown one."""
    if not rev or rev.startswith("-"):
        raise UserError(f"not a revision: {rev!r}")
    done = _run_git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        # --quiet leaves stderr empty for an unknown name: say what was not found.
        raise UserError(f"no such commit or ref: {rev}")
    return done.stdout.strip()


def merge_base(repo: Path, base: str, head: str) -> str:
    return _git(repo, "merge-base", resolve(repo, base), resolve(repo, head))


def current_head(repo: Path) -> str:
    return _git(repo, "rev-parse", "HEAD")


def repo_root(start: Path) -> Path:
    return Path(_git(start, "rev-parse", "--show-toplevel"))


@contextmanager
def worktree(repo: Path, sha: str, label: str) -> Iterator[Path]:
    """A detached checkout of `sha` in a temporary directory, removed afterwards."""
    parent = owned_temp_dir(f"attnwatch-{label}-")  # swept by the next compare if we are killed
    path = parent / "checkout"
    _git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
    try:
        yield path
    finally:
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "remove", "--force", str(path)], capture_output=True, timeout=120
        )
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True, timeout=120)
