"""The one-line plants of scripts/pr_plants/ and their magnitude ladders, for explain_check.py.

A plant is a patch with a header (Plant, Variants, Magnitudes, Expected ...) and a diff whose
`@N@` is the magnitude. An optional `Dtypes:` line names the dtypes its compare measures, for a
plant that changes only another dtype's kernel than the pr shape set's (fp16); without it the
compare measures the set's own. Its `Magnitudes:` are a ladder, smallest expected slowdown first: a
calibrating run climbs it, one rung per plant per round (every plant's first rung, then the
second rung of those still below the target, ...), so one call within its budget calibrates
several plants, and a plant stops climbing at the first rung whose cases realize inside the
target (issue 41: pull-request changes are mostly 1.5-4%) or past it.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from attnwatch.kernels.cases import DTYPES

PLANTS = Path(__file__).resolve().parent / "pr_plants"
PLACEHOLDER = "@N@"
TARGET = (0.015, 0.04)  # the realized slowdown (median of a rung's cases, ratio - 1) a plant is calibrated to
HEADER_FIELDS = ("Plant", "Variants", "Magnitudes", "Expected exact evidence", "Expected noisy cause")


@dataclass
class Plant:
    name: str
    path: Path
    variants: tuple[str, ...]
    magnitudes: tuple[str, ...]
    expected_exact: str
    expected_cause: str
    text: str
    dtypes: tuple[str, ...] = ()  # the header's Dtypes; () = the pr shape set's

    def patch(self, magnitude: str) -> str:
        return self.text.replace(PLACEHOLDER, magnitude)


def load_plants(folder: Path = PLANTS) -> list[Plant]:
    """Every plant patch: its header fields (Variants, Magnitudes, Expected ...) and the diff."""
    out = []
    for path in sorted(folder.glob("*.patch")):
        text = path.read_text(encoding="utf-8")
        header = text.split("\n--- a/", 1)[0]
        fields = dict(re.findall(r"^([A-Z][a-z ]+): (.*)$", header, flags=re.MULTILINE))
        missing = [f for f in HEADER_FIELDS if f not in fields]
        if missing or "\n--- a/" not in text:
            raise SystemExit(f"explain_check: {path.name}: header lacks {', '.join(missing) or 'a diff'}")
        variants = tuple(v for v in fields["Variants"].split() if re.fullmatch(r"[a-z0-9_]+", v))
        dtypes = tuple(fields.get("Dtypes", "").split())
        unknown = [d for d in dtypes if d not in DTYPES]
        if unknown or ("Dtypes" in fields and not dtypes):
            raise SystemExit(f"explain_check: {path.name}: Dtypes must name some of {', '.join(DTYPES)}")
        out.append(
            Plant(
                path.stem,
                path,
                variants,
                tuple(fields["Magnitudes"].split()),
                fields["Expected exact evidence"],
                fields["Expected noisy cause"],
                text,
                dtypes,
            )
        )
    return out


def apply_plant(plant: Plant, magnitude: str, root: Path) -> None:
    """The plant at one magnitude applied to the tree at `root` (scripts/ncu_check.apply_patch:
    each hunk's old text must match exactly once)."""
    from ncu_check import apply_patch

    with tempfile.NamedTemporaryFile("w", suffix=".patch", delete=False) as f:
        f.write(plant.patch(magnitude))
    try:
        apply_patch(Path(f.name), root)
    finally:
        os.unlink(f.name)


def realized(row: dict) -> float | None:
    """A rung's realized change: the median over its cold compare's cases of ratio - 1, or None
    without a measured case."""
    ratios = [c["ratio"] - 1 for c in (row.get("cold") or {}).get("cases", []) if c.get("ratio")]
    return statistics.median(ratios) if ratios else None


def unmeasured(row: dict) -> str:
    """Why a rung has no realized change: not run (and why), or its cases' verdicts (a plant
    that crashes the kernel reads "8 of 8 failed", not as a rung never tried)."""
    if row.get("skipped") or row.get("error"):
        return f"@{row['magnitude']} not run ({row.get('skipped') or row.get('error')})"
    cases = (row.get("cold") or {}).get("cases", [])
    if not cases:
        return f"@{row['magnitude']} measured no case"
    verdicts = Counter(str(c.get("verdict")) for c in cases)
    return f"@{row['magnitude']}: " + ", ".join(f"{n} of {len(cases)} {v}" for v, n in verdicts.most_common())


def placement(value: float | None) -> str:
    """Where a realized change sits against TARGET: "below", "inside", "above" or "unmeasured"."""
    if value is None:
        return "unmeasured"
    return "below" if value < TARGET[0] else ("inside" if value <= TARGET[1] else "above")


def climbing(rows: list[dict]) -> bool:
    """Whether a plant goes on to its next rung after these (its own, in ladder order): only
    while every measured rung was below the target and the last one was measured at all."""
    if not rows:
        return True
    return all(placement(realized(r)) == "below" for r in rows)


def chosen_magnitude(plant: str, rows: list[dict]) -> str:
    """The summary's word on a plant's calibration from its rungs' rows (ladder order)."""
    mine = [r for r in rows if r["plant"] == plant and "magnitude" in r]
    measured = [(r["magnitude"], realized(r)) for r in mine if realized(r) is not None]
    for magnitude, value in measured:
        if placement(value) == "inside":
            return f"@{magnitude} ({value:+.1%} median, inside {TARGET[0]:.1%}-{TARGET[1]:.0%})"
    if not measured:
        return "none: no rung measured" + "".join(f"; {unmeasured(r)}" for r in mine)
    below = [(m, v) for m, v in measured if placement(v) == "below"]
    above = [(m, v) for m, v in measured if placement(v) == "above"]
    if above:
        under = f"@{below[-1][0]} {below[-1][1]:+.1%} below, " if below else ""
        return f"none: {under}@{above[0][0]} {above[0][1]:+.1%} past the target"
    untried = len([r for r in mine if realized(r) is None])
    return f"none: the largest measured, @{measured[-1][0]}, realized {measured[-1][1]:+.1%}" + (
        f" ({untried} rung(s) not measured)" if untried else " (the ladder ends below the target)"
    )


def climb(
    plants: list[Plant], first_only: bool, measure: Callable[[Plant, str], dict], stop: bool = True
) -> list[dict]:
    """Each plant's rungs measured breadth first (module doc): `measure(plant, magnitude)` gives
    a rung's row; with `stop`, a plant leaves the climb once a rung is not below the target
    (climbing). `first_only`: every plant's first rung only."""
    ladders = {p.name: p.magnitudes[:1] if first_only else p.magnitudes for p in plants}
    out: list[dict] = []
    for step in range(max((len(m) for m in ladders.values()), default=0)):
        for plant in plants:
            if step < len(ladders[plant.name]) and (not stop or climbing([r for r in out if r["plant"] == plant.name])):
                out.append(measure(plant, ladders[plant.name][step]))
    return out
