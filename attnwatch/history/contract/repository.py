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

A repository is named OWNER/NAME by every writer (ci.environment.repository_identity: the
setting, GITHUB_REPOSITORY, the origin remote, else `local/<directory>`). Two kinds of run name
it otherwise, and are admitted by these rules only (`map_identities`, before the check):

  - a pytest-benchmark file whose `commit_info.project` is a bare name (no '/': what
    pytest-benchmark itself writes, the origin remote's or the directory's basename, and what
    the gpu_benchmark plugin wrote before it recorded OWNER/NAME) is taken as the history's
    repository when the bare name is that repository's NAME part (`mykernels` for
    `myteam/mykernels`), said in one line; any other bare name is refused, and a history that
    names no repository yet (empty, no setting) refuses it with the setting to give;
  - a run that names no repository (a pytest-benchmark file without `commit_info.project`, or
    an empty `repo`) is taken as the setting's repository where ATTNWATCH_REPO (or --repo) is
    given, said in one line, and refused otherwise. An empty identity never becomes a
    history's: a history whose runs record '' (written before this rule) names no repository.

A refusal is one line naming the bundle's manifest.json (or the pytest-benchmark file) and the
field, what it says and what was expected; nothing is written. Two first ingests racing into an
empty lake can each see it empty: a lake shared by runners sets ATTNWATCH_REPO, which closes that
window.
"""

from __future__ import annotations

import os
import re

from attnwatch.history.contract.bundle import MANIFEST_FILE
from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.history.contract.loaded_bundle import LoadedBundle
from attnwatch.history.contract.names import REPO_ENV

LOCAL_OWNER = "local"  # the OWNER of a checkout that names no repository (ci.environment.repository_identity)
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
    """The repositories the history's runs record (a few at most; more means a mixed history).
    An empty one (a run stored before empty identities were refused) names none."""
    return [
        repo
        for (repo,) in con.execute(
            "SELECT DISTINCT repo FROM runs WHERE coalesce(repo, '') <> '' ORDER BY repo LIMIT 5"
        ).fetchall()
    ]


def check_repository(bundles: list[LoadedBundle], setting: str | None, stored: list[str] | None = None) -> list[str]:
    """Refuse, before anything is written, a run that is not of the history's repository.

    `stored`: the repositories of the runs the history holds (None: not looked at yet, as
    before the history is opened, where only the setting is checked). A run named by a bare
    pytest-benchmark project or by nothing is first mapped to the history's repository where the
    module docstring's rules allow (its manifest then records that repository); returns one line
    per run so mapped.
    """
    notes = map_identities(bundles, setting, stored)
    sources = [(_repo(b), *_manifest(b)) for b in bundles if not _deferred(b, setting, stored)]
    check_sources(sources, setting, stored)
    return notes


def map_identities(bundles: list[LoadedBundle], setting: str | None, stored: list[str] | None) -> list[str]:
    """Give each run that names its repository by a bare pytest-benchmark project, or not at all,
    the history's repository where the rules allow (module docstring); refuse the rest in one
    line. Returns one line per run mapped."""
    notes: list[str] = []
    known = _known_identity(bundles, setting, stored)
    for b in bundles:
        repo, path, field = _repo(b), *_manifest(b)
        if not repo:
            if setting is None:
                raise BundleError(
                    path,
                    field,
                    f"missing: the run does not say which repository it measured; set "
                    f"{REPO_ENV} (or --repo) to the history's OWNER/NAME to store it as that "
                    "repository's; nothing was written",
                )
            b.manifest.repo = setting
            notes.append(f"{path}: {field} is missing: taken as {setting!r}, the repository {REPO_ENV} names")
            continue
        if _complete(repo) or b.source != _PYTEST_BENCHMARK:
            continue
        if known is None:
            if stored is None:
                continue  # the history's runs are not looked at yet
            raise BundleError(
                path,
                field,
                f"{repo!r} is pytest-benchmark's bare project name, not OWNER/NAME, and this "
                f"history names no repository yet: set {REPO_ENV} (or --repo) to "
                f"OWNER/{repo}; nothing was written",
            )
        if repo == known:
            continue  # a history named by a bare name (written so before OWNER/NAME)
        if repo != known.rsplit("/", 1)[-1]:
            raise BundleError(
                path,
                field,
                f"{ascii(repo[:100])} (pytest-benchmark's bare project name) is not the NAME "
                f"of this history's repository {known!r}; nothing was written",
            )
        b.manifest.repo = known
        notes.append(
            f"{path}: {field} {repo!r} (pytest-benchmark's bare project name) taken as {known!r}, "
            "the history's repository of that name"
        )
    return notes


def _known_identity(bundles: list[LoadedBundle], setting: str | None, stored: list[str] | None) -> str | None:
    """The repository the history has or this ingest gives it: the setting, else the one its
    runs record, else (an empty history) the first run that names it completely."""
    if setting is not None:
        return setting
    if stored:
        return stored[0] if len(stored) == 1 else None  # several: check_sources asks for the setting
    if stored is None:
        return None
    return next(
        (_repo(b) for b in bundles if _repo(b) and (_complete(_repo(b)) or b.source != _PYTEST_BENCHMARK)), None
    )


def _deferred(bundle: LoadedBundle, setting: str | None, stored: list[str] | None) -> bool:
    """A bare pytest-benchmark project before the history's runs are looked at: mapped or refused then."""
    return stored is None and setting is None and bundle.source == _PYTEST_BENCHMARK and not _complete(_repo(bundle))


def _complete(repo: str) -> bool:
    """OWNER/NAME (not a bare name, not empty)."""
    return "/" in repo


def check_sources(sources: list[tuple[str, str, str]], setting: str | None, stored: list[str] | None = None) -> None:
    """The rule of check_repository over (repository, file, field) triples: bundles at ingest,
    the runs table of an export at `attnwatch import` and `history copy` (history.store.exchange)."""
    # A run that names no repository names no history's: a bundle's was mapped or refused before
    # this (map_identities); an export's, written before that rule, is carried as it is.
    sources = [s for s in sources if s[0]]
    stored = [r for r in stored or [] if r]
    if setting is not None:
        if stored and setting not in stored:
            raise RepositoryError(
                f"{REPO_ENV} is {setting!r} but this history holds runs of {_listed(stored)}: "
                "point --db at that repository's history; nothing was written"
            )
        expected, why = setting, REPO_ENV
    elif len(stored) > 1:
        raise RepositoryError(
            f"this history holds runs of several repositories ({_listed(stored)}): set "
            f"{REPO_ENV} (or --repo) to the one it tracks; nothing was written"
        )
    elif stored:
        expected, why = stored[0], "the repository of the runs it holds"
    elif sources:
        expected, why = sources[0][0], f"the repository of {sources[0][1]}, first in this ingest"
    else:
        return
    for repo, path, field in sources:
        if repo != expected:
            raise BundleError(
                path,
                field,
                f"{ascii(repo[:100])} is not this history's repository "
                f"{expected!r} ({why}){_hint(repo)}; nothing was written",
            )


def _hint(repo: str) -> str:
    """How a run of a checkout without a remote gets the history's name."""
    if repo.startswith(f"{LOCAL_OWNER}/"):
        return (
            f"; {repo!r} is how a checkout without an origin remote is named: add the remote, or set "
            f"{REPO_ENV} where it is measured, and measure again"
        )
    return ""


def _repo(bundle: LoadedBundle) -> str:
    return bundle.manifest.repo


def _manifest(bundle: LoadedBundle) -> tuple[str, str]:
    """Where a run's repository was read: (file, field)."""
    if bundle.source == _PYTEST_BENCHMARK:
        return bundle.source_path, "commit_info.project"
    return os.path.join(bundle.source_path, MANIFEST_FILE), "repo"


def _listed(repos: list[str]) -> str:
    return ", ".join(repr(r) for r in repos)
