"""Measure base and head in alternating rounds on one GPU, in one job.

Each round runs the whole case list once per side, each side in its own supervised child
process (ci.runner.run_suite): the base with the merge base's `kernels/` (a git worktree), the
head with its own. Order alternates A B | B A | A B ... (an ABBA design): slow drift (clocks,
temperature) then hits both sides alike, and neither side always runs first after the other
has warmed the GPU. Every round's bundle is kept for the artifact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ci.plan import PlannedCase


@dataclass
class Measured:
    base_bundles: list[Path]
    head_bundles: list[Path]


def round_order(round_index: int) -> tuple[str, str]:
    """Which side runs first in a round: base first in even rounds, head first in odd ones."""
    return ("base", "head") if round_index % 2 == 0 else ("head", "base")


def measure_rounds(cases: list[PlannedCase], *, rounds: int, base_root: Path | None, head_root: Path | None,
                   out_dir: Path, options, run_suite: Callable[..., Path],
                   log: Callable[[str], None] = print) -> Measured:
    """Run `rounds` interleaved rounds; `run_suite` is ci.runner.run_suite (or a stand-in)."""
    roots = {"base": base_root, "head": head_root}
    bundles: dict[str, list[Path]] = {"base": [], "head": []}
    for r in range(rounds):
        for side in round_order(r):
            log(f"compare: round {r + 1}/{rounds}: measuring {side}")
            bundle = run_suite(cases, kernels_root=roots[side], out_dir=out_dir / "bundles" / f"{side}-round{r + 1}",
                               options=options)
            bundles[side].append(Path(bundle))
    return Measured(bundles["base"], bundles["head"])
