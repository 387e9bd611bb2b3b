"""`attnwatch ingest PATH...`: load run bundles (directories) and pytest-benchmark files (.json).

Every input is validated before anything is written; one bad input and nothing is stored
(exit 2, the message names the file and field). The same bundle twice is skipped. Every run
must be of the history's repository (`--repo` / ATTNWATCH_REPO; history/contract/repository.py).

`attnwatch ingest --pull-request N --head-sha SHA --source-run W[.A] DIR` stores the round
bundles of one `attnwatch compare --out DIR` as pull-request runs of PR N (ci/integration/pr_runs.py): the
trusted PR-comment workflow does this after checking where the artifact came from.

`--default-branch BRANCH` records the repository's default branch in the history first
(history.store.settings): the branch whose runs are "main runs" for detection and the dashboard.
"""

from __future__ import annotations

import re
from pathlib import Path

from attnwatch.cli.commands import add_lock_timeout
from attnwatch.ci.errors import UserError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="load run bundles / pytest-benchmark JSON files into the history",
        description="Validate every PATH (a run bundle directory or a pytest-benchmark .json file), "
        "then store each as one transaction. Idempotent: a run already stored is skipped.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="bundle directory or pytest-benchmark .json file")
    p.add_argument(
        "--default-branch",
        metavar="BRANCH",
        help="record BRANCH as the repository's default branch (the mainline detection and the "
        "dashboard follow; the GPU workflow passes github.event.repository.default_branch)",
    )
    pr = p.add_argument_group("pull-request compare results (PATH: one `attnwatch compare --out` directory)")
    pr.add_argument("--pull-request", type=int, metavar="N", help="store the compare rounds as runs of this PR")
    pr.add_argument("--head-sha", help="the PR head that was measured (head rounds must record it)")
    pr.add_argument(
        "--source-run", metavar="ID[.ATTEMPT]", help="the gpu-bench workflow run (and attempt) they came from"
    )
    add_lock_timeout(p)
    p.set_defaults(func=_run)


def _source_run(text: str | None):
    from attnwatch.ci.integration.pr_runs import SourceRun

    match = re.fullmatch(r"([1-9][0-9]{0,19})(?:\.([1-9][0-9]{0,4}))?", text or "")
    if match is None:
        raise UserError(f"--source-run: expected RUN_ID or RUN_ID.ATTEMPT, got {text!r}")
    return SourceRun(int(match.group(1)), int(match.group(2) or 1))


def _run(args) -> int:
    # Imported here: duckdb is not installed on GPU runners, where the CLI must still load.
    from attnwatch.history.ingest.write import ingest_paths
    from attnwatch.history.contract.repository import repo_setting

    labels = None
    if args.pull_request is not None or args.head_sha or args.source_run:
        from attnwatch.ci.integration.pr_runs import pull_request_labels

        if args.pull_request is None or not args.head_sha or not args.source_run:
            raise UserError("--pull-request, --head-sha and --source-run go together")
        if len(args.paths) != 1:
            raise UserError("with --pull-request, give exactly one compare output directory")
        labels = pull_request_labels(
            Path(args.paths[0]), args.pull_request, args.head_sha, _source_run(args.source_run)
        )
        args.paths = list(labels)
    if args.default_branch is not None:
        from attnwatch.history.store.db import open_write
        from attnwatch.history.store.settings import check_branch, set_default_branch

        check_branch(args.default_branch, "--default-branch")
        with open_write(args.db, deadline_s=args.lock_timeout) as con:
            set_default_branch(con, args.default_branch, str(args.db))
    report = ingest_paths(
        args.db, args.paths, deadline_s=args.lock_timeout, labels=labels, repo=repo_setting(args.repo)
    )
    for line in report.lines():
        print(line)
    return 0
