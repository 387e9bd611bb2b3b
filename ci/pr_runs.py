"""A pull request's compare results as pull-request runs: their ids, labels and dashboard link.

`attnwatch compare --out DIR` writes compare.json and every round's bundle under
`DIR/bundles/<side>-round<k>` (side: base or head). The PR-comment workflow's trusted ingest job
stores those bundles as pull-request runs (history.pull_request_runs), and the comment links to
them. Both sides compute the ids here, from trusted data only (the verified workflow run and PR,
never the artifact's manifests), so the link opens exactly what was ingested:

    pr<N>-run<W>.<A>-<side>-round<k>     N: PR number, W/A: the gpu-bench run id and attempt

A re-run of the same workflow run (a new attempt) gets new ids; ingesting one artifact twice is a
no-op. Round directories that do not look like `<side>-round<k>` are refused, naming the path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ci.errors import UserError
from history import links
from history.pull_request_runs import PullRequestLabel

BUNDLES_DIR = "bundles"
ROUND_DIR = re.compile(r"^(base|head)-round([1-9][0-9]{0,2})$")
_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class SourceRun:
    """The gpu-bench workflow run an artifact came from (ids from the workflow_run event)."""

    run_id: int
    attempt: int = 1

    def __post_init__(self) -> None:
        if any(type(v) is not int or v < 1 for v in (self.run_id, self.attempt)):  # bool is no attempt number
            raise UserError(f"workflow run id and attempt must be positive integers, got {self.run_id!r}.{self.attempt!r}")


def round_dir(compare_dir: Path, side: str, round_number: int) -> Path:
    """Where `attnwatch compare --out compare_dir` writes one side's round bundle (ci/compare/bundles.py)."""
    name = f"{side}-round{int(round_number)}"
    if not ROUND_DIR.match(name):
        raise ValueError(f"not a round bundle name: {name!r}")
    return Path(compare_dir) / BUNDLES_DIR / name


def run_id_for(pr: int, source: SourceRun, side: str, round_number: int) -> str:
    """The history run id of one round's bundle of one side."""
    return f"pr{int(pr)}-run{source.run_id}.{source.attempt}-{side}-round{int(round_number)}"


def dashboard_link(dashboard_url: str, pr: int, source: SourceRun, gpu: str | None) -> str:
    """The dashboard's Compare page on the first round's base and head runs of this PR, in the
    link format every other dashboard link uses (history.links); tests/test_pr_runs.py opens it."""
    query = links.compare_query(gpu or "", base=run_id_for(pr, source, "base", 1), head=run_id_for(pr, source, "head", 1))
    ordered = {key: query[key] for key in ("base", "head", "gpu") if query.get(key)}  # the runs first, as before
    return links.url(dashboard_url, "compare", ordered)


def pull_request_labels(compare_dir: Path, pr: int, head_sha: str, source: SourceRun) -> dict[Path, PullRequestLabel]:
    """Each round bundle under `compare_dir/bundles` with the label it is stored under.

    Head rounds must record `head_sha` (checked when the bundle is loaded); base rounds record
    the merge base, which the label does not check.
    """
    if pr < 1:
        raise UserError(f"--pull-request: expected a positive PR number, got {pr}")
    if not _SHA.match(head_sha or ""):
        raise UserError(f"--head-sha: expected a 40-character lowercase hex SHA, got {head_sha!r}")
    bundles = Path(compare_dir) / BUNDLES_DIR
    if not bundles.is_dir() or bundles.is_symlink():
        raise UserError(f"{bundles}: no bundles directory (expected the --out directory of `attnwatch compare`)")
    labels: dict[Path, PullRequestLabel] = {}
    for path in sorted(bundles.iterdir()):
        match = ROUND_DIR.match(path.name)
        if match is None or not path.is_dir() or path.is_symlink():
            raise UserError(f"{path}: not a round bundle directory (<base|head>-round<k>); nothing was ingested")
        side, number = match.group(1), int(match.group(2))
        labels[path] = PullRequestLabel(run_id=run_id_for(pr, source, side, number), pr_number=pr,
                                        expect_commit=head_sha if side == "head" else None)
    if not labels:
        raise UserError(f"{bundles}: no round bundles to ingest")
    return labels
