"""`make test`'s split of the suite over pytest-xdist workers (`--dist loadgroup`).

A test file runs whole on one worker, so its module fixtures (histories, servers, builds) are
built once; on a GPU machine every `gpu` test runs on one worker, so no two time the same GPU at
once. Files with `slow` or `browser` tests are handed out first (with --no-loadscope-reorder), so
that no long file starts last while the other workers idle.

The workers collect and decide each test's group; the controller hands out whole groups.
pytest-xdist's own loadgroup carries a group to the controller by rewriting the test's node id,
which pytest 9.2 no longer takes (pytest-xdist issue 1386): every test became a group of its own,
and a file's module fixtures were built again on every worker that ran one of its tests. Here the
workers write the groups to a folder of the session (GROUPS_ENV) and the controller's scheduler
reads them there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# The folder the workers write their groups to; the controller names it before they start.
GROUPS_ENV = "ATTNWATCH_TEST_GROUPS"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order_and_group(items, has_cuda: bool) -> dict[str, str]:
    """Put the files with slow or browser tests first (each file's own order kept) and give each
    test its group: its file, or "gpu" for a GPU test on a GPU machine."""
    heavy = {file_of(item.nodeid) for item in items if "slow" in item.keywords or "browser" in item.keywords}
    items.sort(key=lambda item: file_of(item.nodeid) not in heavy)  # stable
    return {item.nodeid: "gpu" if has_cuda and "gpu" in item.keywords else file_of(item.nodeid) for item in items}


def record(groups: dict[str, str], worker: str) -> None:
    """Write a worker's groups where the controller's scheduler reads them (whole or not at all)."""
    folder = Path(os.environ[GROUPS_ENV])
    partial = folder / f".{worker}.json"
    partial.write_text(json.dumps(groups))
    partial.replace(folder / f"{worker}.json")


class FileGroupScheduling(LoadScopeScheduling):
    """pytest-xdist's scope scheduling with the workers' recorded groups as the scopes."""

    def __init__(self, config, log=None) -> None:
        super().__init__(config, log)
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # first asked once every worker has collected (and recorded)
            self._groups = {}
            for path in sorted(Path(os.environ[GROUPS_ENV]).glob("*.json")):
                self._groups.update(json.loads(path.read_text()))
        return self._groups.get(nodeid, file_of(nodeid))
