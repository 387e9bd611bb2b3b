"""Ingest: validated bundles (and pytest-benchmark files) into the history, idempotently.

`ingest_paths(location, paths)`:
  1. loads and validates every input before touching the database: one bad input and
     nothing is written (BundleError names the file and field); every run must be of the
     history's repository (history.contract.repository: the ATTNWATCH_REPO setting, else the
     repository its runs record);
  2. opens the history for writing once (history.store.db.open_write: on a file, the write lock with
     backoff until a deadline) and checks each run id against it: the same content again is
     skipped and reported; the same run id with different content is refused, again before
     anything is written;
  3. writes each new run in its own transaction: runs, commits (upsert), results, samples,
     correctness, builds, ncu_kernels, ncu_metrics, ncu_cases, variant_fingerprints, and the
     binaries' static code (history.ingest.binaries: each binary once). A failure rolls back that run.
     On a file each COMMIT is a checkpoint into the file (history.store.db), so a run reported
     "inserted" is in the file; a fault names the run it stopped at and how many were stored.

A pull request's compare bundles are ingested with a PullRequestLabel each
(history.contract.pull_request_runs): the run id, trigger, PR and branch then come from the trusted
caller, not from the bundle. No pull-request run writes a commits row: commit metadata (message,
date, parent, branch) is taken only from runs on trusted refs, since a PR's bundle is written by
the PR's own code.

On a DuckLake many ingests run at once (no serialized ingest job): each run's transaction checks
the run id again inside itself and claims it (history.store.transactions), so of two concurrent ingests
of one bundle one commits it and the other, retried after the conflict, reports it skipped. The
commit row is claimed likewise: runs of one commit on several GPUs arrive together.

A lake's catalog can also go away for a moment (PostgreSQL restarted): each step on a lake (the
check of what is stored, then each run's transaction) is retried while it is unreachable
(history.store.lake_retry.retrying). A run whose COMMIT may have landed before the connection broke
is found stored on the retry and reported skipped, with that reason: never doubled, and never
reported inserted unless this ingest's COMMIT returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import duckdb

from attnwatch.history.ingest.rows import commit_row, run_row, table_rows
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.errors import BundleError, HistoryNotFoundError, LockTimeoutError
from attnwatch.history.store.faults import file_fault
from attnwatch.history.store.lake_retry import retrying
from attnwatch.history.store.locks import DEFAULT_LOCK_WAIT_S, lock_wait_s, precheck_wait_s
from attnwatch.history.contract.loaded_bundle import LoadedBundle
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.migrations import database_schema_version
from attnwatch.history.contract.pull_request_runs import (
    PULL_REQUEST_TRIGGER,
    PullRequestLabel,
    as_pull_request_run,
)
from attnwatch.history.contract.repository import check_repository, stored_repositories
from attnwatch.history.ingest.binaries import write_binaries
from attnwatch.history.store.arrow_insert import insert_arrow, rows_to_arrow
from attnwatch.history.store.transactions import Claims, write_transaction
from attnwatch.history.contract.validate import input_identity, load_input

# How long a run's transaction on a lake keeps retrying lost conflicts: each try may itself spend
# tens of seconds in DuckLake's own commit retries when many writers commit at once.
LAKE_CONFLICT_DEADLINE_S = 300.0

CHILD_TABLES = (
    "results",
    "samples",
    "correctness",
    "builds",
    "ncu_kernels",
    "ncu_metrics",
    "ncu_cases",
    "variant_fingerprints",
)

COMMIT_COLUMNS = ("parent_sha", "message", "committed_at", "branch", "repo")  # besides sha


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
    # One line per run whose repository was taken as the history's (history.contract.repository).
    notes: list[str] = field(default_factory=list)

    @property
    def inserted(self) -> list[BundleReport]:
        return [b for b in self.bundles if b.action == "inserted"]

    @property
    def skipped(self) -> list[BundleReport]:
        return [b for b in self.bundles if b.action == "skipped"]

    def lines(self) -> list[str]:
        """A short human report: the repository mappings, one line per input and a total."""
        out = list(dict.fromkeys(self.notes))
        for b in self.bundles:
            if b.action == "inserted":
                counts = ", ".join(f"{n} {t}" for t, n in b.rows.items() if n)
                out.append(f"inserted {b.run_id}  ({counts})  from {b.source_path}")
            else:
                out.append(f"skipped  {b.run_id}  ({b.reason})  from {b.source_path}")
        results = sum(b.rows.get("results", 0) for b in self.inserted)
        out.append(
            f"{len(self.inserted)} run(s) inserted ({results} result rows), {len(self.skipped)} skipped -> {self.db_path}"
        )
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
                b.source_path,
                "run_id",
                f"{b.manifest.run_id!r} is also the run id of {other.source_path} with different content",
            )
    return loaded


def ingest_paths(
    location: HistoryLocation,
    paths: Iterable[str | Path],
    deadline_s: float | None = None,
    labels: Mapping[Path, PullRequestLabel] | None = None,
    repo: str | None = None,
) -> IngestReport:
    """Validate every input, then store each new run in its own transaction (module docstring).

    Inputs whose exact content (run id and content hash) is already stored are skipped
    without being parsed again: CI retries and re-uploads are common and cost nothing.
    `labels` (path -> PullRequestLabel) stores those inputs as pull-request runs; they are
    always validated, since their stored run id is not the one in their files. `repo` is the
    repository setting (history.contract.repository): every run must be of the history's repository.
    `deadline_s`: the wait for a busy history file (None: history.store.locks.lock_wait_s()).
    """
    deadline_s = lock_wait_s() if deadline_s is None else deadline_s
    inputs = [Path(p) for p in paths]
    labels = {Path(p): label for p, label in (labels or {}).items()}
    if location.is_lake:  # no lock to avoid; each step retried while the catalog is unreachable
        unchanged = retrying(
            location,
            lambda: _on_lake(
                location, deadline_s, lambda con: _stored_identities(con, [p for p in inputs if p not in labels])
            ),
        )
        bundles = load_all([p for p in inputs if p not in unchanged], labels)
        report = _ingest_lake(location, bundles, deadline_s, repo)
    else:
        unchanged = _already_stored(location, [p for p in inputs if p not in labels])
        bundles = load_all([p for p in inputs if p not in unchanged], labels)
        notes = check_repository(bundles, repo)  # before the history is opened (or created)
        report = (
            ingest_loaded(location, bundles, deadline_s=deadline_s, repo=repo)
            if bundles
            else IngestReport(location.label)
        )
        report.notes[:0] = notes
    fresh = iter(report.bundles)
    ordered = []
    for p in inputs:
        if p in unchanged:
            ordered.append(BundleReport(str(p), unchanged[p], "skipped", reason="already in the history, unchanged"))
        else:
            ordered.append(next(fresh))
    report.bundles = ordered
    return report


def _already_stored(location: HistoryLocation, paths: list[Path]) -> dict[Path, str]:
    """Inputs whose run id is stored with this exact content hash (path -> run id), checked on a
    short read-only connection so that an unchanged re-ingest never waits for the file's write lock."""
    if not location.file.is_file():
        return {}
    try:
        with open_read(location, deadline_s=precheck_wait_s()) as con:
            if database_schema_version(con) == 0:
                return {}  # no runs table yet: a new history, or one whose first migration was interrupted
            return _stored_identities(con, paths)
    except (LockTimeoutError, HistoryNotFoundError):
        return {}  # busy, or not created yet: validate everything, which is always correct


def _stored_identities(con, paths: list[Path]) -> dict[Path, str]:
    identities = {p: input_identity(p) for p in paths}
    wanted = {ident[0] for ident in identities.values() if ident}
    stored = _known_runs(con, sorted(wanted)) if wanted else {}
    return {p: ident[0] for p, ident in identities.items() if ident and stored.get(ident[0]) == ident[1]}


def ingest_loaded(
    location: HistoryLocation, bundles: list[LoadedBundle], deadline_s: float | None = None, repo: str | None = None
) -> IngestReport:
    deadline_s = lock_wait_s() if deadline_s is None else deadline_s
    if location.is_lake:
        return _ingest_lake(location, bundles, deadline_s, repo)
    with open_write(location, deadline_s=deadline_s) as con:
        return _ingest_on(con, location, bundles, deadline_s, repo)


def _ingest_on(
    con, location: HistoryLocation, bundles: list[LoadedBundle], deadline_s: float, repo: str | None = None
) -> IngestReport:
    notes = check_repository(bundles, repo, stored_repositories(con)) if bundles else []
    known = _known_runs(con, [b.manifest.run_id for b in bundles])
    report = _write_each(
        location,
        bundles,
        known,
        lambda b: (
            write_transaction(
                con,
                lambda c, claims: _write_bundle(c, claims, b),
                location.label,
                deadline_s=max(deadline_s, DEFAULT_LOCK_WAIT_S),
            ),
            False,
        ),
    )
    report.notes = notes
    return report


def _on_lake(location: HistoryLocation, deadline_s: float, work):
    with open_write(location, deadline_s=deadline_s) as con:
        return work(con)


def _ingest_lake(
    location: HistoryLocation, bundles: list[LoadedBundle], deadline_s: float, repo: str | None = None
) -> IngestReport:
    """`_ingest_on` for a lake, one step at a time, each retried while the catalog is unreachable."""
    known, stored_repos = retrying(
        location,
        lambda: _on_lake(
            location,
            deadline_s,
            lambda con: (_known_runs(con, [b.manifest.run_id for b in bundles]), stored_repositories(con)),
        ),
    )
    notes = check_repository(bundles, repo, stored_repos) if bundles else []

    def write(b: LoadedBundle):
        broken: list[Exception] = []
        rows = retrying(
            location,
            lambda: _on_lake(
                location,
                deadline_s,
                lambda con: write_transaction(
                    con,
                    lambda c, claims: _write_bundle(c, claims, b),
                    location.label,
                    deadline_s=max(deadline_s, LAKE_CONFLICT_DEADLINE_S),
                ),
            ),
            on_retry=broken.append,
        )
        return rows, bool(broken)

    report = _write_each(location, bundles, known, write)
    report.notes = notes
    return report


def _write_each(location: HistoryLocation, bundles: list[LoadedBundle], known: dict[str, str], write) -> IngestReport:
    """Each new run through `write(bundle) -> (rows or None when found stored, whether the catalog
    connection broke meanwhile)`; clashes refused before anything is written."""
    report = IngestReport(db_path=location.label)
    for b in bundles:
        _refuse_clash(b, known.get(b.manifest.run_id))
    done: set[str] = set()
    for b in bundles:
        run_id = b.manifest.run_id
        if run_id in known or run_id in done:
            why = "already in the history" if run_id in known else "same bundle given twice"
            report.bundles.append(BundleReport(b.source_path, run_id, "skipped", reason=why))
            continue
        try:
            rows, broken = write(b)
        except (duckdb.Error, OSError) as exc:  # a file's fault: say how far this ingest got, then its line
            fault = (
                None
                if location.is_lake
                else file_fault(
                    exc,
                    location.label,
                    doing=f"while storing run {run_id}, after {len(report.inserted)} run(s) of this ingest were stored",
                )
            )
            if fault is None:
                raise
            raise fault from None
        done.add(run_id)
        if rows is not None:
            report.bundles.append(BundleReport(b.source_path, run_id, "inserted", rows=rows))
            continue
        why = (
            (
                "found stored when retried after the catalog connection broke (this ingest's commit landed, "
                "or a concurrent one's)"
            )
            if broken
            else "stored meanwhile by a concurrent ingest"
        )  # a lake only
        report.bundles.append(BundleReport(b.source_path, run_id, "skipped", reason=why))
    return report


def _refuse_clash(b: LoadedBundle, stored: str | None) -> None:
    if stored is not None and stored != b.content_sha256:
        raise BundleError(
            b.source_path,
            "run_id",
            f"{b.manifest.run_id!r} is already in the history with different content "
            f"(stored sha256 {stored[:12]}, this {b.content_sha256[:12]}); a run id names one "
            "measurement: give a new run a new id. Nothing was written",
        )


def _known_runs(con, run_ids: list[str]) -> dict[str, str]:
    if not run_ids:
        return {}
    found = con.execute(
        "SELECT run_id, content_sha256 FROM runs WHERE run_id IN (SELECT unnest(?::VARCHAR[]))", [run_ids]
    ).fetchall()
    return dict(found)


def _write_bundle(con, claims: Claims, b: LoadedBundle) -> dict[str, int] | None:
    """One run's rows, inside the caller's transaction; None when the run is already stored.

    The run id is checked again here, inside the transaction: on a lake another ingest may have
    committed it since the check before the loop (or since this transaction's last attempt).
    """
    run_id = b.manifest.run_id
    stored = _known_runs(con, [run_id]).get(run_id)
    if stored is not None:
        _refuse_clash(b, stored)
        return None
    claims.take("run", run_id)
    tables = table_rows(b)
    rows = {"runs": insert_arrow(con, "runs", rows_to_arrow([run_row(b)]))}
    commit = commit_row(b) if b.manifest.trigger != PULL_REQUEST_TRIGGER else None
    if commit is not None:
        upsert_commit(con, claims, commit)
    for table in CHILD_TABLES:
        rows[table] = insert_arrow(con, table, tables[table])
    rows.update(write_binaries(con, claims, b))  # each binary once, by digest (migration 016)
    return rows


def upsert_commit(con, claims: Claims, commit: dict) -> None:
    """Insert a commit, or fill the columns a stored one lacks (later runs may know more).

    No ON CONFLICT: a lake has no key to conflict on. A new sha is claimed; an update of a stored
    row is a delete and an insert on a lake, which conflicts with concurrent writers of the table,
    so a race costs a retry, never a lost or doubled row.
    """
    stored = con.execute(f"SELECT {', '.join(COMMIT_COLUMNS)} FROM commits WHERE sha = ?", [commit["sha"]]).fetchone()
    if stored is None:
        claims.take("commit", commit["sha"])
        con.execute(
            f"INSERT INTO commits (sha, {', '.join(COMMIT_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)",
            [commit["sha"], *(commit.get(c) for c in COMMIT_COLUMNS)],
        )
        return
    missing = [c for c, value in zip(COMMIT_COLUMNS, stored) if value is None and commit.get(c) is not None]
    if missing:
        con.execute(
            f"UPDATE commits SET {', '.join(f'{c} = ?' for c in missing)} WHERE sha = ?",
            [*(commit[c] for c in missing), commit["sha"]],
        )
