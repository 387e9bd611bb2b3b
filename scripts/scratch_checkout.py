"""A scratch git repository made from this checkout, for the checks that commit changes to a copy
of the tree and measure them for real (bisect_check, select_check, verdict_check, explain_check,
stored_cause_check): the files to copy, the copy, git with a fixed author (a new repository, a
commit), the device to measure on, and the thresholds a CPU run of such a check is judged by."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".cutlass", "node_modules", "bisect-check-out"}


def tree_files() -> list[str]:
    """This checkout's files: git's list (tracked, and untracked ones not ignored), or, in a copy
    without .git, every file outside the build and cache folders."""
    listed = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
    )
    if listed.returncode == 0 and (REPO_ROOT / ".git").exists():
        return [n for n in listed.stdout.decode().split("\0") if n]
    out = []
    for folder, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        links = [d for d in dirs if (Path(folder) / d).is_symlink()]  # listed as the links they are, not entered
        out += [
            str((Path(folder) / f).relative_to(REPO_ROOT)) for f in files + links if not f.endswith((".pyc", ".so"))
        ]
    return out


def copy_checkout(repo: Path) -> None:
    """This checkout's files (`tree_files`) copied into `repo`. A symbolic link is copied as the
    link it is (ci -> attnwatch/ci: the top-level names of the package's folders), never followed."""
    for name in tree_files():
        source = REPO_ROOT / name
        target = repo / name
        if source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), target)
        elif source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def git(repo: Path, *args: str) -> str:
    """`git -C repo ARGS` as a fixed author; its output, or the script exits naming the git command."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "scratch check",
        "GIT_AUTHOR_EMAIL": "check@example.org",
        "GIT_COMMITTER_NAME": "scratch check",
        "GIT_COMMITTER_EMAIL": "check@example.org",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        sys.exit(f"{Path(sys.argv[0]).stem}: git {args[0]}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def init_repo(repo: Path, message: str, branch: str | None = None) -> str:
    """`repo` made a git repository (on `branch`, else git's default) whose first commit, `message`,
    holds every file in it; that commit's SHA."""
    git(repo, "init", "--quiet", *(["-b", branch] if branch else []))
    git(repo, "add", "-A")
    return commit(repo, message)


def commit(repo: Path, message: str) -> str:
    """Commit every change to a tracked file, and the files added since the last commit; the SHA."""
    git(repo, "commit", "--quiet", "-am", message)
    return git(repo, "rev-parse", "HEAD")


def resolve_device(choice: str) -> str:
    """`--device`: "cuda" or "cpu" as given, or for "auto" what the run's own detection says
    (ci.selection.detect_device_kind: NVML first, torch asked in a child)."""
    if choice != "auto":
        return choice
    from attnwatch.ci.selection import detect_device_kind

    return detect_device_kind()


def cpu_thresholds(path: Path) -> Path:
    """The history's thresholds with a `[gpu."cpu"]` rule of 50% written to `path`: on a shared CPU
    only a large plant is decidable (bisect_check's 5 ms sleep made 3x longer)."""
    text = (REPO_ROOT / "history/analysis/thresholds.toml").read_text()
    path.write_text(
        text + '\n[gpu."cpu"]\nmin_effect = 0.5\nmin_effect_reason = "a scratch check on a shared CPU: '
        'only a large plant (a 5 ms sleep made 3x longer) is decidable there."\n'
    )
    return path
