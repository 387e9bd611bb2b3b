"""`attnwatch compare --pytest PATH`: A/B a repository's own gpu_benchmark suite between revisions.

Each side is a checkout (a git worktree of the merge base; the head is this checkout when it
is the revision asked for, else a worktree too). A round runs the suite once per side, as
`python -m pytest PATH --benchmark-json=...` in that side's checkout (so the side's own
package, at the checkout's top, is what the suite imports, before any installed copy), the
sides alternating which goes first round by round so drift over the session hits both alike.
Each round's file is read by the pytest-benchmark reader (history.contract.pytest_benchmark_import,
which validates the plugin's records) into one round (ci/compare/rounds.py, `round_of`), and
the verdicts come from the same code as a variant compare's (ci/compare/analysis.py: the
per-round medians' interval, history.analysis.ab). The rounds are a fixed number (--rounds,
default [compare] min_rounds): a round is a whole suite in a fresh process, so there is no
warm worker to stop early.

A suite that fails (a test failed, say an incorrect output) still gives its file: the failed
test's record says why, and the side's verdict shows it. A suite that measured nothing is an
error with the last line of pytest's output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from attnwatch.ci.compare.out_dir import PYTEST_ROUNDS_DIR
from attnwatch.ci.compare.rounds import RoundData, round_of
from attnwatch.ci.errors import UserError
from attnwatch.ci.run_config import compare_setting
from attnwatch.history.contract.pytest_benchmark_import import load_pytest_benchmark_file


def suite_command(suite: str, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider", f"--benchmark-json={out}", *extra]


def run_suite_once(root: Path, suite: str, out: Path, extra: list[str], timeout_s: float) -> RoundData:
    """The suite in `root` once; its pytest-benchmark file as a round."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            suite_command(suite, out, extra), cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise UserError(f"--pytest {suite}: the suite ran past {timeout_s:.0f} s") from None
    if not out.is_file() or out.stat().st_size == 0:  # pytest-benchmark leaves it empty when nothing was measured
        tail = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["no output"]
        raise UserError(
            f"--pytest {suite}: pytest exited {done.returncode} and measured nothing in {root.name}: {tail[0][:300]}"
        )
    return round_of(load_pytest_benchmark_file(out))


def measure_suite(
    suite: str, roots: dict[str, Path], out: Path, rounds: int, extra: list[str], log: Callable[[str], None]
) -> tuple[list[RoundData], list[RoundData]]:
    """(base rounds, head rounds): `rounds` alternating runs of the suite on each side, each
    within [compare] pytest_suite_timeout_s (ci/run_config.toml)."""
    timeout_s = float(compare_setting("pytest_suite_timeout_s"))
    folder = (out / PYTEST_ROUNDS_DIR).absolute()  # each side's suite runs in its own checkout: not relative to it
    folder.mkdir(parents=True, exist_ok=True)
    taken: dict[str, list[RoundData]] = {"base": [], "head": []}
    for k in range(rounds):
        order = ("base", "head") if k % 2 == 0 else ("head", "base")
        for side in order:
            started = time.monotonic()
            taken[side].append(run_suite_once(roots[side], suite, folder / f"{side}-round{k}.json", extra, timeout_s))
            log(
                f"compare --pytest: round {k + 1}/{rounds} {side}: {len(taken[side][-1].cases)} case(s) "
                f"in {time.monotonic() - started:.1f} s"
            )
    return taken["base"], taken["head"]
