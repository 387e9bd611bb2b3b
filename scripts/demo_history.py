"""Measure a short main-branch history for the shipped demo: one `attnwatch run` per commit.

    python3 scripts/demo_history.py --repo REPO_OR_GIT_BUNDLE --plan docs/data/demo/plan.toml \
        --work SCRATCH_CLONE --out OUT_DIR -- --shapes pr --variants sdpa,... --ncu

The plan (TOML, one `[[step]]` per run, each with its reason) names real commits of this
repository and scratch changes made on top of them: a patch applied and committed, an empty
commit, or the revert of an earlier step. Each step is checked out in a scratch clone, committed
if it is a scratch change (at the moment it is measured, so commit dates order the series as a
push history would), then, unless the step says `measure = false`, measured by that checkout's own `python3 -m attnwatch run` with every
argument after `--`. The runs count as main runs: the branch is given as GitHub gives it on a
push (`GITHUB_REF_NAME=main`) and the trigger is `push`.

Written per step under --out: the run bundle `NN-<sha7>/`, the commit as `git show` prints it
(`NN-<sha7>.diff`), and one line of `steps.jsonl` (commit, message, the command, exit status,
seconds). `--tar FILE` rewrites FILE after every step, so a call stopped at its time limit still
returns what finished. Only the standard library is used: the script runs before anything is
installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

IDENTITY = {
    "GIT_AUTHOR_NAME": "attnwatch demo",
    "GIT_AUTHOR_EMAIL": "demo@attnwatch.invalid",
    "GIT_COMMITTER_NAME": "attnwatch demo",
    "GIT_COMMITTER_EMAIL": "demo@attnwatch.invalid",
}
KINDS = ("commit", "patch", "empty", "revert")


class PlanError(Exception):
    pass


def load_plan(path: Path) -> list[dict]:
    """The steps of a plan file, each checked for exactly one kind and a reason."""
    steps = tomllib.loads(path.read_text()).get("step", [])
    if not steps:
        raise PlanError(f"{path}: no [[step]] entries")
    for i, step in enumerate(steps):
        kinds = [k for k in KINDS if k in step]
        if len(kinds) != 1:
            raise PlanError(f"{path}: step[{i}]: exactly one of {', '.join(KINDS)} is needed, found {kinds or 'none'}")
        if not step.get("why"):
            raise PlanError(f"{path}: step[{i}].why: every step says why it is in the history")
        if kinds[0] != "commit" and not step.get("message"):
            raise PlanError(f"{path}: step[{i}].message: a scratch commit needs its message")
        if kinds[0] == "revert" and not (isinstance(step["revert"], int) and 0 <= step["revert"] < i):
            raise PlanError(f"{path}: step[{i}].revert: the index of an earlier step")
    return steps


def git(work: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", "-C", str(work), *args], capture_output=True, text=True, env={**os.environ, **IDENTITY}
    )
    if done.returncode != 0 and check:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def make_commit(work: Path, step: dict, plan_dir: Path, shas: list[str]) -> str:
    """Check out or create the step's commit; returns its SHA."""
    if "commit" in step:
        git(work, "checkout", "-q", "--detach", step["commit"])
        return git(work, "rev-parse", "HEAD")
    if git(work, "branch", "--show-current") != "main":
        git(work, "checkout", "-q", "-B", "main")  # scratch commits go on a branch named main
    if "patch" in step:
        git(work, "apply", "--index", str(plan_dir / step["patch"]))
        git(work, "commit", "-q", "-m", step["message"])
    elif "revert" in step:
        git(work, "revert", "--no-commit", shas[step["revert"]])
        git(work, "commit", "-q", "-m", step["message"])
    else:
        git(work, "commit", "-q", "--allow-empty", "-m", step["message"])
    return git(work, "rev-parse", "HEAD")


def write_tar(out: Path, tar_path: Path) -> None:
    tmp = tar_path.with_suffix(".part")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    tmp.replace(tar_path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, help="a git repository or bundle holding the plan's commits")
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--work", required=True, type=Path, help="where the scratch clone is made (must not exist)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--tar", type=Path, default=None)
    p.add_argument("--repo-name", default="attnwatch", help="recorded as the runs' repository (GITHUB_REPOSITORY)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--only", type=int, default=None, help="stop after this many steps")
    args = p.parse_args(own)
    args.plan, args.out = args.plan.resolve(), args.out.resolve()
    try:
        steps = load_plan(args.plan)
    except PlanError as e:
        print(f"demo_history: {e}", file=sys.stderr)
        return 2
    subprocess.run(["git", "clone", "-q", "--no-checkout", args.repo, str(args.work)], check=True)
    args.out.mkdir(parents=True, exist_ok=True)
    shas: list[str] = []
    env = {**os.environ, "GITHUB_REF_NAME": "main", "GITHUB_REPOSITORY": args.repo_name, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)  # each checkout measures its own code
    for i, step in enumerate(steps[: args.only]):
        sha = make_commit(args.work, step, args.plan.parent, shas)
        shas.append(sha)
        if not step.get("measure", True):
            continue
        name = f"{i + 1:02d}-{sha[:7]}"
        (args.out / f"{name}.diff").write_text(git(args.work, "show", "--stat", "--patch", "--format=fuller", "HEAD"))
        command = [
            args.python,
            "-m",
            "attnwatch",
            "run",
            "--trigger",
            "push",
            "--no-progress",
            *run_args,
            "--out",
            str(args.out / name),
        ]
        print(
            f"[{time.strftime('%H:%M:%S')}] step {i + 1}/{len(steps)} {sha[:7]}: {git(args.work, 'log', '-1', '--format=%s')}",
            flush=True,
        )
        start = time.monotonic()
        rc = subprocess.run(command, cwd=args.work, env=env).returncode
        record = {
            "step": i + 1,
            "commit": sha,
            "parent": git(args.work, "rev-parse", "--verify", "--quiet", "HEAD^", check=False) or None,
            "kind": next(k for k in KINDS if k in step),
            "message": git(args.work, "log", "-1", "--format=%B"),
            "why": step["why"],
            "command": ["python3", "-m", "attnwatch", *command[3:]],
            "exit_status": rc,
            "seconds": round(time.monotonic() - start, 1),
        }
        with open(args.out / "steps.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"[{time.strftime('%H:%M:%S')}] step {i + 1} done: exit {rc}, {record['seconds']} s", flush=True)
        if args.tar:
            write_tar(args.out, args.tar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
