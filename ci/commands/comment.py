"""`attnwatch comment`: post (or update) the one sticky A/B comment on a pull request.

Reads compare.json as untrusted data (validated by ci.compare.report.load_report), renders the
markdown, appends it to the job summary ($GITHUB_STEP_SUMMARY) and upserts the comment through
the REST API. Environment: GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_TOKEN (never printed),
GITHUB_SERVER_URL + GITHUB_RUN_ID (run link), ATTNWATCH_DASHBOARD_URL.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ci.comment.render import MARKER, Links, render_comment, render_short
from ci.compare.report import load_report
from ci.errors import UserError
from ci.github import DEFAULT_API_URL, DEFAULT_BOT_LOGIN, GitHubClient, GitHubError


def register(subparsers) -> None:
    p = subparsers.add_parser("comment", help="post the sticky A/B comment on a pull request (and the job summary)")
    p.add_argument("--compare", required=True, help="compare.json written by `attnwatch compare`")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--pr", type=int, help="pull request number")
    target.add_argument("--sha", help="find the open PR(s) whose head is this commit (default: the report's head)")
    p.add_argument("--dry-run", action="store_true", help="print the markdown; call no API")
    p.add_argument("--run-url", help="link to the workflow run (default: from GITHUB_SERVER_URL/REPOSITORY/RUN_ID)")
    p.add_argument("--dashboard-url", default=os.environ.get("ATTNWATCH_DASHBOARD_URL"), help="link to the dashboard")
    p.add_argument("--bot-login", default=os.environ.get("ATTNWATCH_BOT_LOGIN", DEFAULT_BOT_LOGIN),
                   help=f"author of the sticky comment (default {DEFAULT_BOT_LOGIN})")
    p.set_defaults(func=_run)


def _run_url(args) -> str | None:
    if args.run_url:
        return args.run_url
    server, repo, run_id = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server.rstrip('/')}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None


def _write_summary(body: str) -> None:
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(body.replace(MARKER + "\n", "") + "\n")


def _run(args) -> int:
    report = load_report(args.compare)
    links = Links(run_url=_run_url(args), dashboard_url=args.dashboard_url)
    body = render_comment(report, links)
    _write_summary(body)
    if args.dry_run:
        sys.stdout.write(body)
        return 0
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise UserError("GITHUB_TOKEN is not set (use --dry-run to only print the comment)")
    client = GitHubClient(
        repo=os.environ.get("GITHUB_REPOSITORY", ""),
        token=token,
        api_url=os.environ.get("GITHUB_API_URL", DEFAULT_API_URL),
        log=lambda message: print(message, file=sys.stderr),
    )
    prs = [args.pr] if args.pr else client.pulls_for_sha(args.sha or report.head_sha)
    if not prs:
        print(f"attnwatch comment: no open pull request has head {(args.sha or report.head_sha)[:12]}; nothing posted")
        return 0
    for pr in prs:
        try:
            action, comment_id = client.upsert_comment(pr, body, MARKER, args.bot_login)
        except GitHubError as exc:
            if exc.status != 422:
                raise
            print(f"attnwatch comment: GitHub refused the body for PR #{pr} ({exc}); posting the short form",
                  file=sys.stderr)
            action, comment_id = client.upsert_comment(pr, render_short(report, links), MARKER, args.bot_login)
        print(f"attnwatch comment: {action} comment {comment_id} on PR #{pr}")
    return 0
