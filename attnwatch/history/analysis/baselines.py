"""Pinned baselines, read from `history/analysis/baselines.toml`: a named commit or run that any run can
be compared against ("against release v1.2"), not only the merge base or the previous main run.

    [[baseline]]
    name = "v1.2"                 # what people call it: a release tag, a milestone
    commit = "0123abcd..."        # the commit it pins (7 to 64 hex digits); or
    run = "run-id"                # one stored run (then the comparison uses exactly that run)
    reason = "why this is a reference point"

A tag is named by its commit because the dashboard reads the history, not the repository: a
tag that moves would otherwise silently change every comparison against it. Used by
`attnwatch compare --baseline NAME` (the baseline's commit is the A/B base) and the
dashboard's Compare page ("against a pinned baseline": the baseline's run, or its commit's
newest run on the chosen GPU).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from attnwatch.history.errors import HistoryError
from attnwatch.toml_reader import read_toml

REPO_BASELINES = Path(__file__).resolve().parent / "baselines.toml"
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/+-]{0,99}$")


class BaselineError(HistoryError):
    """The baselines file is malformed, or a named baseline is not in it."""


@dataclass(frozen=True)
class Baseline:
    name: str
    commit: str | None
    run: str | None
    reason: str

    def describe(self) -> str:
        return f"{self.name} ({'run ' + self.run if self.run else 'commit ' + (self.commit or '')[:12]})"


def baselines_path(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("ATTNWATCH_BASELINES")
    return Path(env) if env else REPO_BASELINES


def load_baselines(path: str | Path | None = None) -> list[Baseline]:
    """Every pinned baseline in file order; a missing default file is none."""
    file = baselines_path(path)
    data = read_toml(
        file, "baselines", BaselineError, missing_ok=path is None and "ATTNWATCH_BASELINES" not in os.environ
    )
    if data is None:
        return []
    if set(data) - {"baseline"} or not isinstance(data.get("baseline", []), list):
        raise BaselineError(f"{file}: expected only [[baseline]] entries")
    out: list[Baseline] = []
    for i, entry in enumerate(data.get("baseline", [])):
        where = f"{file}: baseline[{i}]"
        if not isinstance(entry, dict):
            raise BaselineError(f"{where}: expected a table")
        unknown = set(entry) - {"name", "commit", "run", "reason"}
        if unknown:
            raise BaselineError(f"{where}: unknown keys {sorted(unknown)} (known: commit, name, reason, run)")
        name, commit, run, reason = (entry.get(k) for k in ("name", "commit", "run", "reason"))
        if not isinstance(name, str) or not _NAME.match(name):
            raise BaselineError(
                f"{where}.name: expected a name of letters, digits and ._/+- (at most 100), got {name!r}"
            )
        if any(b.name == name for b in out):
            raise BaselineError(f"{where}.name: {name!r} is pinned twice")
        if (commit is None) == (run is None):
            raise BaselineError(f"{where}: give exactly one of commit and run")
        if commit is not None and (not isinstance(commit, str) or not _SHA.match(commit)):
            raise BaselineError(f"{where}.commit: expected a commit sha (7 to 64 lowercase hex digits), got {commit!r}")
        if run is not None and (not isinstance(run, str) or not _NAME.match(run)):
            raise BaselineError(f"{where}.run: expected a run id, got {run!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise BaselineError(f"{where}.reason: every baseline needs a reason")
        out.append(Baseline(name, commit, run, reason.strip()))
    return out


def find_baseline(name: str, path: str | Path | None = None) -> Baseline:
    found = [b for b in load_baselines(path) if b.name == name]
    if not found:
        known = ", ".join(b.name for b in load_baselines(path)) or "none"
        raise BaselineError(f"{baselines_path(path)}: no baseline named {name[:100]!r} (pinned: {known})")
    return found[0]
