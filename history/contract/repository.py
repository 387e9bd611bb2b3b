"""Which repository a history tracks: a run of any other is refused at ingest.

A series is keyed by case, GPU model and pool (history.contract.series_key), not by repository, so a
bundle whose manifest names another repository would join this repository's series and raise
its alerts. Every run records its repository (`runs.repo`, from the manifest's `repo`; a plain
pytest-benchmark file's `commit_info.project`), and ingest admits a run only when its repository
is the history's:

  - the setting `ATTNWATCH_REPO` (or `attnwatch --repo`), `owner/name` as GitHub spells it,
    names it where given; the workflows set it to `github.repository`. A history already
    holding runs must hold runs of that repository (a setting never re-labels a history);
  - without the setting, the history's repository is the one its runs record: the first
    ingest into an empty history sets it (every run of that ingest must agree), and a history
    whose runs name several repositories (written before this check) asks for the setting.

A refusal is one line naming the bundle's manifest.json and the field `repo`, what it says and
what was expected; nothing is written. Two first ingests racing into an empty lake can each see
it empty: a lake shared by runners sets ATTNWATCH_REPO, which closes that window.
"""

from __future__ import annotations

import os
import re

from attnwatch.history.contract.bundle import MANIFEST_FILE
from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.history.contract.loaded_bundle import LoadedBundle

REPO_ENV = "ATTNWATCH_REPO"
# What a repository setting may be: printable ASCII without spaces (owner/name, or a local
# project's name such as the "local" a run outside any remote records).
_SETTING = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")
_PYTEST_BENCHMARK = "pytest-benchmark"


class RepositoryError(HistoryError):
    """The repository setting is malformed or disagrees with the runs the history holds."""


def repo_setting(explicit: str | None = None) -> str | None:
    """The configured repository: `explicit` (--repo), else $ATTNWATCH_REPO, else None."""
    value = explicit if explicit is not None else os.environ.get(REPO_ENV)
    if value is None or not value.strip():
        return None
    value = value.strip()
    if not _SETTING.fullmatch(value):
        raise RepositoryError(f"{REPO_ENV} / --repo: {ascii(value[:80])} is not a repository name (owner/name)")
    return value


def stored_repositories(con) -> list[str]:
    """The repositories the history's runs record (a few at most; more means a mixed history)."""
    return [repo for (repo,) in con.execute("SELECT DISTINCT repo FROM runs ORDER BY repo LIMIT 5").fetchall()]


def check_repository(bundles: list[LoadedBundle], setting: str | None, stored: list[str] | None = None) -> None:
    """Refuse, before anything is written, a run that is not of the history's repository.

    `stored`: the repositories of the runs the history holds (None: not looked at yet, as
    before the history is opened, where only the setting is checked).
    """
    check_sources([(_repo(b), *_manifest(b)) for b in bundles], setting, stored)


def check_sources(sources: list[tuple[str, str, str]], setting: str | None, stored: list[str] | None = None) -> None:
    """The rule of check_repository over (repository, file, field) triples: bundles at ingest,
    the runs table of an export at `attnwatch import` and `history copy` (history.store.exchange)."""
    stored = stored or []
    if setting is not None:
        if stored and setting not in stored:
            raise RepositoryError(f"{REPO_ENV} is {setting!r} but this history holds runs of {_listed(stored)}: "
                                  "point --db at that repository's history; nothing was written")
        expected, why = setting, REPO_ENV
    elif len(stored) > 1:
        raise RepositoryError(f"this history holds runs of several repositories ({_listed(stored)}): set "
                              f"{REPO_ENV} (or --repo) to the one it tracks; nothing was written")
    elif stored:
        expected, why = stored[0], "the repository of the runs it holds"
    elif sources:
        expected, why = sources[0][0], f"the repository of {sources[0][1]}, first in this ingest"
    else:
        return
    for repo, path, field in sources:
        if repo != expected:
            raise BundleError(path, field, f"{ascii(repo[:100])} is not this history's repository "
                                           f"{expected!r} ({why}); nothing was written")


def _repo(bundle: LoadedBundle) -> str:
    return bundle.manifest.repo


def _manifest(bundle: LoadedBundle) -> tuple[str, str]:
    """Where a run's repository was read: (file, field)."""
    if bundle.source == _PYTEST_BENCHMARK:
        return bundle.source_path, "commit_info.project"
    return os.path.join(bundle.source_path, MANIFEST_FILE), "repo"


def _listed(repos: list[str]) -> str:
    return ", ".join(repr(r) for r in repos)
