"""`attnwatch affected`: whether a pull request changes anything a GPU runs, on a CPU, before any GPU job.

    attnwatch affected --base origin/main [--head HEAD] [--json FILE] [--pr N]

Checks the merge base out as a git worktree and compares it with the head by source
fingerprints (ci/compare/affected.py): the harness, the files that decide how the GPU job runs,
and every variant's code, data files, CUDA headers and build flags. Prints which variants differ
and why, writes the decision as JSON (--json) and, under GitHub Actions, `gpu=true|false` and
`build=<variants>` to $GITHUB_OUTPUT. With --pr, when nothing differs, posts the pull request's
sticky comment saying so (GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_API_URL). Exits 0 whatever it
decides; a fault (no such revision) is one line and exit 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "affected",
        help="say (on a CPU) which variants a pull request changes; nothing: post that and skip the GPU",
        description="Compare the merge base with the head by source fingerprints (variants' code, data files, CUDA "
        "headers, build flags; the harness; the GPU job's own files) without building or importing torch. Writes "
        "gpu=true|false and build=<variants> to $GITHUB_OUTPUT.",
    )
    p.add_argument("--base", required=True, help="base revision (its merge base with --head is compared)")
    p.add_argument("--head", default="HEAD", help="head revision (default HEAD)")
    p.add_argument("--json", type=Path, help="write the decision here (schema attnwatch-affected/1)")
    p.add_argument(
        "--pr", type=int, help="post the sticky 'nothing the GPU runs changed' comment on this PR when nothing differs"
    )
    p.add_argument("--bot-login", default=None, help="author of the sticky comment (default: as `attnwatch comment`)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.ci.compare.affected import affected, roles
    from attnwatch.ci.compare.revisions import current_head, merge_base, repo_root, resolve, worktree

    repo = repo_root(Path.cwd())
    head_sha = resolve(repo, args.head)
    base_sha = merge_base(repo, args.base, head_sha)
    with worktree(repo, base_sha, "base") as base_root:
        if head_sha == current_head(repo):
            result = affected(base_root, repo, base_sha=base_sha, head_sha=head_sha)
        else:
            with worktree(repo, head_sha, "head") as head_root:
                result = affected(base_root, head_root, base_sha=base_sha, head_sha=head_sha)
    if result.everything:
        print(f"affected: every variant: {result.everything}")
    elif not result.gpu:
        print(
            f"affected: nothing the GPU runs changed ({len(result.variants)} variants, "
            f"{result.harness_files} harness and pipeline files compared)"
        )
    for name, why in roles(result).items():
        print(f"affected: build {name}: {why}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result.to_dict(), indent=1, sort_keys=True) + "\n")
    _write_outputs(result)
    if args.pr and not result.gpu:
        _post(args, result)
    return 0


def _write_outputs(result) -> None:
    output = os.environ.get("GITHUB_OUTPUT")
    if output:
        with Path(output).open("a", encoding="utf-8") as fh:
            fh.write(f"gpu={'true' if result.gpu else 'false'}\nbuild={','.join(result.build or [])}\n")


def _post(args, result) -> None:
    """The sticky comment (ci/integration/comment/unchanged.py), on PR `args.pr` while its head is still the head compared."""
    from attnwatch.ci.integration.comment.render import MARKER
    from attnwatch.ci.integration.comment.unchanged import render_unchanged
    from attnwatch.ci.integration.github import DEFAULT_BOT_LOGIN, actions_run_url, append_step_summary, client_from_env

    client = client_from_env(lambda message: print(message, file=sys.stderr), "affected --pr: GITHUB_TOKEN is not set")
    head = (client.pull_request(args.pr).get("head") or {}).get("sha")
    if head != result.head_sha:
        print(f"affected: PR #{args.pr}'s head is now {str(head)[:12]}, not {result.head_sha[:12]}: nothing posted")
        return
    body = render_unchanged(result, actions_run_url())
    append_step_summary(body.replace(MARKER + "\n", ""))
    action, comment_id = client.upsert_comment(
        args.pr, body, MARKER, args.bot_login or os.environ.get("ATTNWATCH_BOT_LOGIN", DEFAULT_BOT_LOGIN)
    )
    print(f"affected: {action} comment {comment_id} on PR #{args.pr}")
