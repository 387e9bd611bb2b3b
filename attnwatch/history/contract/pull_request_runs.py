"""Storing a pull request's compare bundles as pull-request runs, labelled by the trusted side.

A pull request's A/B bundles are written by the PR's own code on an untrusted runner, so their
manifests may say anything: a run id that collides with a main run, branch "main", a commit date
that would reorder a main series. The trusted ingest job therefore does not take those labels
from the bundle. It passes a PullRequestLabel per bundle (ci/integration/pr_runs.py derives it from the
verified workflow run), and `as_pull_request_run` applies it before anything is written:

- the run id is the label's (unique per PR, workflow run and attempt, round and side);
- trigger `pull_request`, the label's PR number, branch `pull/<N>`: never `main`, so no PR
  result enters a main series, the latest-main views or change-point detection;
- the commit's message, date and parent are dropped (commit metadata is recorded only from
  runs on trusted refs: history/ingest/write.py writes no commits row for a pull-request run);
- a bundle that must be of the measured head (`expect_commit`) and records another commit is
  refused, naming the file and field.

Everything else in the bundle is still validated as untrusted data by history.contract.validate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from attnwatch.history.errors import BundleError
from attnwatch.history.contract.loaded_bundle import LoadedBundle

PULL_REQUEST_TRIGGER = "pull_request"


@dataclass(frozen=True)
class PullRequestLabel:
    """How one PR bundle is stored: decided from trusted data, never read from the bundle."""

    run_id: str
    pr_number: int
    expect_commit: str | None = None  # the measured head SHA for head rounds; None: not checked

    @property
    def branch(self) -> str:
        return f"pull/{self.pr_number}"


def as_pull_request_run(bundle: LoadedBundle, label: PullRequestLabel) -> LoadedBundle:
    """The bundle relabelled as a pull-request run (a new LoadedBundle; the input is unchanged)."""
    m = bundle.manifest
    if label.expect_commit is not None and m.commit_sha != label.expect_commit:
        raise BundleError(
            bundle.source_path,
            "commit_sha",
            f"{m.commit_sha[:40]!r} is not the measured head {label.expect_commit}: this bundle is "
            "not of the pull request's head; nothing was written",
        )
    manifest = replace(
        m,
        run_id=label.run_id,
        trigger=PULL_REQUEST_TRIGGER,
        pr_number=label.pr_number,
        branch=label.branch,
        commit_message=None,
        commit_date=None,
        parent_sha=None,
    )
    return replace(bundle, manifest=manifest)
