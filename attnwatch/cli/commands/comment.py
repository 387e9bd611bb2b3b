"""`attnwatch comment`: post (or update) the one sticky A/B comment on a pull request.

Reads compare.json as untrusted data (validated by ci.compare.report.load_report), renders the
markdown, appends it to the job summary ($GITHUB_STEP_SUMMARY) and upserts the comment through
the REST API. Environment: GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_TOKEN (never printed),
GITHUB_SERVER_URL + GITHUB_RUN_ID (run link), ATTNWATCH_DASHBOARD_URL.

The report never chooses where the verdict goes. The target is one of:
  --workflow-run-event FILE  the pr-comment workflow: the workflow_run event GitHub wrote, checked
                             by ci.integration.comment.provenance (this repository's gpu-bench.yml run, the PR
                             from the event or the maintainer's dispatch, its head still the
                             measured SHA); the checked PR and SHA go to $GITHUB_OUTPUT for the
                             job that ingests the rounds as pull-request runs;
  --pr N / --sha SHA         by hand: the PR(s), whose current head the API reports.
Either way the report's head_sha must be the target's head SHA, or nothing is posted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from attnwatch.ci.integration.comment.provenance import Refused, Target, check_report_head, load_event, resolve_target
from attnwatch.ci.integration.comment.render import MARKER, Links, render_comment, render_short
from attnwatch.ci.compare.report import load_report
from attnwatch.ci.errors import UserError
from attnwatch.ci.integration.github import (
    DEFAULT_BOT_LOGIN,
    GitHubClient,
    GitHubError,
    actions_run_url,
    append_step_summary,
    client_from_env,
)
from attnwatch.ci.integration.pr_runs import dashboard_link


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "comment",
        help="post the sticky A/B comment on a pull request (and the job summary)",
        description="Render compare.json (read as untrusted data) as the pull request's one sticky comment, "
        "append it to $GITHUB_STEP_SUMMARY and create or update the comment through the GitHub API. Nothing is "
        "posted unless the report's head is the target's head.",
    )
    p.add_argument("--compare", required=True, help="compare.json written by `attnwatch compare`")
    target = p.add_mutually_exclusive_group()
    target.add_argument(
        "--workflow-run-event",
        metavar="FILE",
        help="the workflow_run event of the gpu-bench run (GITHUB_EVENT_PATH): the PR and SHA "
        "are taken from it and checked against the API",
    )
    target.add_argument("--pr", type=int, help="pull request number (its current head must be the report's)")
    target.add_argument("--sha", help="the open PR(s) whose head is this commit")
    p.add_argument("--dry-run", action="store_true", help="print the markdown; call no API")
    p.add_argument(
        "--run-url",
        help="link to the workflow run (default: the event's run, else GITHUB_SERVER_URL/REPOSITORY/RUN_ID)",
    )
    p.add_argument("--dashboard-url", default=os.environ.get("ATTNWATCH_DASHBOARD_URL"), help="link to the dashboard")
    p.add_argument(
        "--bot-login",
        default=os.environ.get("ATTNWATCH_BOT_LOGIN", DEFAULT_BOT_LOGIN),
        help=f"author of the sticky comment (default {DEFAULT_BOT_LOGIN})",
    )
    p.set_defaults(func=_run)


def _run_url(args, target: Target | None) -> str | None:
    if args.run_url:
        return args.run_url
    if target is not None and target.run_url:
        return target.run_url
    return actions_run_url()


def _dashboard_url(args, target: Target | None, gpu: str) -> str | None:
    """The Compare page on this PR's stored runs when the run is known, else the plain dashboard."""
    if args.dashboard_url and target is not None and target.source is not None:
        return dashboard_link(args.dashboard_url, min(target.prs), target.source, gpu)
    return args.dashboard_url


def _write_summary(body: str) -> None:
    append_step_summary(body.replace(MARKER + "\n", ""))


def _write_outputs(target: Target) -> None:
    """The checked target for later jobs (only values this job verified; never the report's)."""
    output = os.environ.get("GITHUB_OUTPUT")
    if output and target.source is not None:
        with Path(output).open("a", encoding="utf-8") as fh:
            fh.write(
                f"pr={min(target.prs)}\nhead_sha={target.head_sha}\n"
                f"source_run={target.source.run_id}.{target.source.attempt}\n"
            )


def _target(args, client: GitHubClient) -> Target | None:
    if args.workflow_run_event:
        return resolve_target(load_event(args.workflow_run_event), client.repo, client)
    if args.pr:
        pr = client.pull_request(args.pr)
        head = (pr.get("head") or {}).get("sha")
        if pr.get("state") != "open" or not isinstance(head, str):
            raise Refused(f"PR #{args.pr} is {pr.get('state')!r}, not an open pull request")
        return Target((args.pr,), head, None, "manual")
    if args.sha:
        prs = client.pulls_for_sha(args.sha)
        return Target(tuple(prs), args.sha, None, "manual") if prs else None
    raise UserError("say where to post: --workflow-run-event FILE, --pr N or --sha SHA (the report never chooses)")


def _run(args) -> int:
    report = load_report(args.compare)  # a malformed artifact is refused before anything else
    if args.dry_run:
        body = render_comment(report, Links(run_url=_run_url(args, None), dashboard_url=args.dashboard_url))
        _write_summary(body)
        sys.stdout.write(body)
        return 0
    client = client_from_env(
        lambda message: print(message, file=sys.stderr),
        "GITHUB_TOKEN is not set (use --dry-run to only print the comment)",
    )
    target = _target(args, client)
    if target is None:
        print("attnwatch comment: nothing to post (no open pull request for that commit, or the run did not finish)")
        return 0
    check_report_head(report.head_sha, target, args.compare)
    _write_outputs(target)  # verified: the rounds may be stored even if posting fails below
    links = Links(
        run_url=_run_url(args, target),
        dashboard_url=_dashboard_url(args, target, report.gpu_name),
        dashboard_root=args.dashboard_url,
    )
    body = render_comment(report, links)
    _write_summary(body)
    for pr in target.prs:
        try:
            action, comment_id = client.upsert_comment(pr, body, MARKER, args.bot_login)
        except GitHubError as exc:
            if exc.status != 422:
                raise
            print(
                f"attnwatch comment: GitHub refused the body for PR #{pr} ({exc}); posting the short form",
                file=sys.stderr,
            )
            action, comment_id = client.upsert_comment(pr, render_short(report, links), MARKER, args.bot_login)
        print(f"attnwatch comment: {action} comment {comment_id} on PR #{pr}")
    return 0
