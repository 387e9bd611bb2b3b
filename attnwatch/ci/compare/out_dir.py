"""What a measuring `attnwatch compare` writes under its --out folder, named once, and the removal
of an earlier compare's before a new one measures.

A folder holds one compare: the PR-comment workflow stores every round bundle under `bundles/`
as a pull-request run (ci/integration/pr_runs.py), so rounds left by an earlier compare with
more rounds (another base, another head) would be stored beside this one's; and a worker's
`kernels` link left there would name a checkout that is gone. Only the names below are removed,
never anything else a user keeps in the folder; a compare of recorded bundles
(`--base-bundles/--head-bundles`) removes nothing, as its inputs may lie there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

from attnwatch.ci.compare.report import COMPARE_FILE
from attnwatch.ci.integration.pr_runs import BUNDLES_DIR

SESSION_FILE = "session.json"  # ci/compare/session.py: the design, the rounds, the workers
WORKERS_DIR = "workers"  # each worker's folder (its kernels link, its log)
NCU_DIR = "ncu"  # the profiles of each side
BINARIES_DIR = "binaries"  # both sides' cubins and their SASS, read for the code changes
PYTEST_ROUNDS_DIR = "pytest-rounds"  # --pytest: each side's suite runs
OUTPUTS = (BUNDLES_DIR, WORKERS_DIR, NCU_DIR, BINARIES_DIR, PYTEST_ROUNDS_DIR, SESSION_FILE, COMPARE_FILE)


def fresh_out(out: Path, log: Callable[[str], None]) -> None:
    """Make `out` and remove from it what an earlier compare wrote (OUTPUTS), saying so."""
    out.mkdir(parents=True, exist_ok=True)
    removed = []
    for name in OUTPUTS:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_symlink() or path.exists():
            path.unlink()
        else:
            continue
        removed.append(name)
    if removed:
        log(f"compare: {out} held an earlier compare's {', '.join(removed)}: removed, so it holds this compare's alone")
