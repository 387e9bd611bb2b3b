"""A pull request's compare results as pull-request runs: their ids, labels and dashboard link.

`attnwatch compare --out DIR` writes compare.json and every round's bundle under
`DIR/bundles/<side>-round<k>` (side: base or head). The PR-comment workflow's trusted ingest job
stores those bundles as pull-request runs (history.contract.pull_request_runs), and the comment links to
them. Both sides compute the ids here, from trusted data only (the verified workflow run and PR,
never the artifact's manifests), so the link opens exactly what was ingested:

    pr<N>-run<W>.<A>-<side>-round<k>     N: PR number, W/A: the gpu-bench run id and attempt

A re-run of the same workflow run (a new attempt) gets new ids; ingesting one artifact twice is a
no-op. Round directories that do not look like `<side>-round<k>` are refused, naming the path, and
so is an artifact past the bounds of pr_ingest_limits.toml (rounds per side, files and folders,
total bytes), before any bundle in it is read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.history import links
from attnwatch.history.contract.pull_request_runs import PullRequestLabel
from attnwatch.history.contract.validate import check_tree
from attnwatch.toml_reader import read_toml

BUNDLES_DIR = "bundles"
ROUND_DIR = re.compile(r"^(base|head)-round([1-9][0-9]{0,2})$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
LIMITS_PATH = Path(__file__).resolve().parent / "pr_ingest_limits.toml"


@dataclass(frozen=True)
class SourceRun:
    """The gpu-bench workflow run an artifact came from (ids from the workflow_run event)."""

    run_id: int
    attempt: int = 1

    def __post_init__(self) -> None:
        if any(type(v) is not int or v < 1 for v in (self.run_id, self.attempt)):  # bool is no attempt number
            raise UserError(
                f"workflow run id and attempt must be positive integers, got {self.run_id!r}.{self.attempt!r}"
            )


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
    query = links.compare_query(
        gpu or "", base=run_id_for(pr, source, "base", 1), head=run_id_for(pr, source, "head", 1)
    )
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
    limits = ingest_limits()
    labels: dict[Path, PullRequestLabel] = {}
    per_side = {"base": 0, "head": 0}
    with os.scandir(bundles) as listing:
        for entry in listing:  # unsorted, so that a huge folder is refused at its first stranger
            path = bundles / entry.name
            match = ROUND_DIR.match(entry.name)
            if match is None or entry.is_symlink() or not entry.is_dir():
                raise UserError(f"{path}: not a round bundle directory (<base|head>-round<k>); nothing was ingested")
            side, number = match.group(1), int(match.group(2))
            per_side[side] += 1
            if per_side[side] > limits["max_rounds_per_side"]:
                raise UserError(
                    f"{bundles}: more than {limits['max_rounds_per_side']} {side} rounds, past what a "
                    f"pull-request ingest takes ({LIMITS_PATH.name}); nothing was ingested"
                )
            labels[path] = PullRequestLabel(
                run_id=run_id_for(pr, source, side, number),
                pr_number=pr,
                expect_commit=head_sha if side == "head" else None,
            )
    if not labels:
        raise UserError(f"{bundles}: no round bundles to ingest")
    _check_size(bundles, sorted(labels), limits)
    return dict(sorted(labels.items()))


def _check_size(bundles: Path, rounds: list[Path], limits: dict[str, int]) -> None:
    """Refuse an artifact of more entries or bytes than `limits`, walking no further than them
    (each round through the bundle reader's own walk, which refuses links; history.contract.validate)."""
    entries, total = len(rounds), 0
    for path in rounds:
        tree = check_tree(path)
        entries += len(tree)
        total += sum(size for _, size in tree)
        if entries > limits["max_entries"]:
            raise UserError(
                f"{bundles}: more than {limits['max_entries']} files and folders, past what a "
                f"pull-request ingest takes ({LIMITS_PATH.name}); nothing was ingested"
            )
        if total > limits["max_total_bytes"]:
            raise UserError(
                f"{bundles}: more than {limits['max_total_bytes']} bytes, past what a "
                f"pull-request ingest takes ({LIMITS_PATH.name}); nothing was ingested"
            )


@lru_cache(maxsize=1)
def ingest_limits() -> dict[str, int]:
    """The bounds of a pull-request ingest, from pr_ingest_limits.toml (each with its reason there)."""
    limits = read_toml(LIMITS_PATH, "pull-request ingest limits", ValueError)
    expected = {"max_rounds_per_side", "max_entries", "max_total_bytes"}
    if set(limits) != expected or not all(type(v) is int and v > 0 for v in limits.values()):
        raise ValueError(f"{LIMITS_PATH.name}: expected positive integers {sorted(expected)}, got {limits}")
    return limits
