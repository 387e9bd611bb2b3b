"""Ingest: validated bundles (and pytest-benchmark files) into the history, idempotently.

`ingest_paths(db_path, paths)`:
  1. loads and validates every input before touching the database: one bad input and
     nothing is written (BundleError names the file and field);
  2. takes the write lock once (history.db.open_write: backoff until a deadline) and checks
     each run id against the history: the same content again is skipped and reported; the
     same run id with different content is refused, again before anything is written;
  3. writes each new run in its own transaction: runs, commits (upsert), results, samples,
     correctness, builds, ncu_kernels, ncu_metrics, ncu_cases. A failure rolls back that run.

A pull request's compare bundles are ingested with a PullRequestLabel each
(history.pull_request_runs): the run id, trigger, PR and branch then come from the trusted
caller, not from the bundle. No pull-request run writes a commits row: commit metadata (message,
date, parent, branch) is taken only from runs on trusted refs, since a PR's bundle is written by
the PR's own code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from history.bundle_rows import commit_row, run_row, table_rows
from history.db import open_read, open_write
from history.errors import BundleError, LockTimeoutError
from history.loaded_bundle import LoadedBundle
from history.pull_request_runs import PULL_REQUEST_TRIGGER, PullRequestLabel, as_pull_request_run
from history.store import insert_arrow, rows_to_arrow
from history.validate import input_identity, load_input

PRECHECK_DEADLINE_S = 2.0  # how long the unchanged-input check waits for a busy history

CHILD_TABLES = ("results", "samples", "correctness", "builds", "ncu_kernels", "ncu_metrics", "ncu_cases")

_UPSERT_COMMIT = """
INSERT INTO commits (sha, parent_sha, message, committed_at, branch, repo)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (sha) DO UPDATE SET
    parent_sha   = coalesce(commits.parent_sha, excluded.parent_sha),
    message      = coalesce(commits.message, excluded.message),
    committed_at = coalesce(commits.committed_at, excluded.committed_at),
    branch       = coalesce(commits.branch, excluded.branch),
    repo         = coalesce(commits.repo, excluded.repo)
"""


@dataclass
class BundleReport:
    source_path: str
    run_id: str
    action: str  # "inserted" | "skipped"
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written (0 when skipped)
    reason: str = ""


@dataclass
class IngestReport:
    db_path: str
    bundles: list[BundleReport] = field(default_factory=list)

    @property
    def inserted(self) -> list[BundleReport]:
        return [b for b in self.bundles if b.action == "inserted"]

    @property
    def skipped(self) -> list[BundleReport]:
        return [b for b in self.bundles if b.action == "skipped"]

    def lines(self) -> list[str]:
        """A short human report, one line per input and a total."""
        out = []
        for b in self.bundles:
            if b.action == "inserted":
                counts = ", ".join(f"{n} {t}" for t, n in b.rows.items() if n)
                out.append(f"inserted {b.run_id}  ({counts})  from {b.source_path}")
            else:
                out.append(f"skipped  {b.run_id}  ({b.reason})  from {b.source_path}")
        results = sum(b.rows.get("results", 0) for b in self.inserted)
        out.append(f"{len(self.inserted)} run(s) inserted ({results} result rows), {len(self.skipped)} skipped -> {self.db_path}")
        return out


def load_all(paths: Iterable[str | Path], labels: Mapping[Path, PullRequestLabel] | None = None) -> list[LoadedBundle]:
    """Validate every input (and relabel the labelled ones); the first problem raises and nothing
    has been written."""
    labels = labels or {}
    loaded = []
    for p in map(Path, paths):
        bundle = load_input(p)
        loaded.append(as_pull_request_run(bundle, labels[p]) if p in labels else bundle)
    first: dict[str, LoadedBundle] = {}
    for b in loaded:
        other = first.setdefault(b.manifest.run_id, b)
        if other is not b and other.content_sha256 != b.content_sha256:
            raise BundleError(
                b.source_path, "run_id",
                f"{b.manifest.run_id!r} is also the run id of {other.source_path} with different content",
            )
    return loaded


def ingest_paths(db_path: str | Path, paths: Iterable[str | Path], deadline_s: float = 60.0,
                 labels: Mapping[Path, PullRequestLabel] | None = None) -> IngestReport:
    """Validate every input, then store each new run in its own transaction (module docstring).

    Inputs whose exact content (run id and content hash) is already stored are skipped
    without being parsed again: CI retries and re-uploads are common and cost nothing.
    `labels` (path -> PullRequestLabel) stores those inputs as pull-request runs; they are
    always validated, since their stored run id is not the one in their files.
    """
    paths = [Path(p) for p in paths]
    labels = {Path(p): label for p, label in (labels or {}).items()}
    unchanged = _already_stored(db_path, [p for p in paths if p not in labels])
    bundles = load_all([p for p in paths if p not in unchanged], labels)
    report = ingest_loaded(db_path, bundles, deadline_s=deadline_s)
    fresh = iter(report.bundles)
    ordered = []
    for p in paths:
        if p in unchanged:
            ordered.append(BundleReport(str(p), unchanged[p], "skipped", reason="already in the history, unchanged"))
        else:
            ordered.append(next(fresh))
    report.bundles = ordered
    return report


def _already_stored(db_path: str | Path, paths: list[Path]) -> dict[Path, str]:
    """Inputs whose run id is stored with this exact content hash (path -> run id)."""
    if not Path(db_path).is_file():
        return {}
    identities = {p: input_identity(p) for p in paths}
    wanted = {ident[0] for ident in identities.values() if ident}
    if not wanted:
        return {}
    try:
        with open_read(db_path, deadline_s=PRECHECK_DEADLINE_S) as con:
            stored = _known_runs(con, sorted(wanted))
    except LockTimeoutError:
        return {}  # busy: fall back to validating everything, which is always correct
    return {p: ident[0] for p, ident in identities.items() if ident and stored.get(ident[0]) == ident[1]}


def ingest_loaded(db_path: str | Path, bundles: list[LoadedBundle], deadline_s: float = 60.0) -> IngestReport:
    report = IngestReport(db_path=str(db_path))
    with open_write(db_path, deadline_s=deadline_s) as con:
        known = _known_runs(con, [b.manifest.run_id for b in bundles])
        for b in bundles:
            stored = known.get(b.manifest.run_id)
            if stored is not None and stored != b.content_sha256:
                raise BundleError(
                    b.source_path, "run_id",
                    f"{b.manifest.run_id!r} is already in the history with different content "
                    f"(stored sha256 {stored[:12]}, this {b.content_sha256[:12]}); a run id names one "
                    "measurement: give a new run a new id. Nothing was written",
                )
        done: set[str] = set()
        for b in bundles:
            run_id = b.manifest.run_id
            if run_id in known or run_id in done:
                why = "already in the history" if run_id in known else "same bundle given twice"
                report.bundles.append(BundleReport(b.source_path, run_id, "skipped", reason=why))
                continue
            rows = _write_bundle(con, b)
            done.add(run_id)
            report.bundles.append(BundleReport(b.source_path, run_id, "inserted", rows=rows))
    return report


def _known_runs(con, run_ids: list[str]) -> dict[str, str]:
    if not run_ids:
        return {}
    found = con.execute(
        "SELECT run_id, content_sha256 FROM runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [run_ids]
    ).fetchall()
    return dict(found)


def _write_bundle(con, b: LoadedBundle) -> dict[str, int]:
    """One run, one transaction: all of its rows or none of them."""
    tables = table_rows(b)
    con.execute("BEGIN TRANSACTION")
    try:
        rows = {"runs": insert_arrow(con, "runs", rows_to_arrow([run_row(b)]))}
        commit = commit_row(b) if b.manifest.trigger != PULL_REQUEST_TRIGGER else None
        if commit is not None:
            con.execute(_UPSERT_COMMIT, list(commit.values()))
        for table in CHILD_TABLES:
            rows[table] = insert_arrow(con, table, tables[table])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return rows
