"""Each noisy counter's noise band: how far it moves between two profiles of one build.

A counter rule (history.analysis.ncu_explain) fires only when its signal moved outside the band
of its counters, so a 15% move of a stall ratio whose profiles of one build agree within 6% is
a finding, and a 15% move of L2 bytes on a small case (which moved 15% between identical
profiles) is not. Bands come from measured spread, recorded with its provenance in
`noise_bands.toml`: a case's own spread when measured (`[[case]]`, e.g. by
scripts/explain_check.py's A/A, or `measured` passed in when a compare profiled a side twice),
else the counter's spread over the pr set. A counter with neither has no band; the rule then
falls back to its fixed threshold, and the evidence says so. A case and counter measured by more
than one A/A keeps the widest spread recorded.

A case's own spread can widen its band, never narrow it below the counter's: one pair of
profiles is a poor estimate of a case's noise. For normal noise the ratio of two independent
differences is folded-Cauchy, so the next difference exceeds 3 times the first with probability
(2/pi)·atan(1/3) = 20%; on the H200 the L2 bytes of cuda_wmma/h100_small/fp16/noncausal moved
0.34% between the two profiles of 2026-12-05 and 1.95% between the two of 2026-11-26
(tests/data/ncu).

`spreads` computes the spreads from repeated profiles (the largest |a - b| / |a| over the
pairs), the same statistic the file records.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeGuard

from attnwatch.toml_reader import read_toml

BANDS_FILE = Path(__file__).resolve().parent / "noise_bands.toml"


@dataclass(frozen=True)
class Band:
    width: float  # relative: a move of |h - b| / |b| up to this is noise
    source: str


@dataclass(frozen=True)
class NoiseBands:
    counter: Mapping[str, tuple[float, str]]  # counter -> (spread, source)
    case: Mapping[tuple[str, str], tuple[float, str]] = field(default_factory=dict)  # (case, counter) -> ...
    counter_margin: float = 1.5
    case_margin: float = 3.0
    case_floor: float = 0.01

    def band(
        self,
        counters: Sequence[str],
        case_id: str | None = None,
        measured: Mapping[str, float] | None = None,
        base: Mapping[str, float] | None = None,
        floor: float = 0.0,
    ) -> Band | None:
        """The band of a rule's signal, the sum of `counters`, or None when one has none.
        `measured`: this case's own spreads, measured now (a side profiled twice).

        With the base's values (`base`, and the rule's `floor` the move is taken against), the
        band is the signal's: a sum moves by at most the sum of its counters' moves, so its
        relative band is sum(width_i * |b_i|) / max(sum |b_i|, floor) (the triangle
        inequality), and a counter that is noisy only because it is tiny (DRAM writes of a few
        KB moved 888% between two profiles of triton_fa2 on the H200) does not blind the rule
        to its large partner. Without them, the widest counter's band."""
        widths, sources = [], []
        for name in counters:
            if measured and name in measured:
                width, source = max(measured[name] * self.case_margin, self.case_floor), "measured in this compare"
            elif case_id is not None and (case_id, name) in self.case:
                spread, source = self.case[(case_id, name)]
                width = max(spread * self.case_margin, self.case_floor)
            elif name in self.counter:
                spread, source = self.counter[name]
                width = spread * self.counter_margin
            else:
                return None
            if name in self.counter and width < self.counter[name][0] * self.counter_margin:
                # one pair's spread may widen a case's band, never narrow it (module doc)
                spread, source = self.counter[name]
                width = spread * self.counter_margin
            widths.append(width)
            sources.append(source)
        if not widths:
            return None
        values = [abs(base[name]) for name in counters if base is not None and _finite(base.get(name))]
        if len(widths) > 1 and len(values) == len(counters) and max(sum(values), floor) > 0:
            width = sum(w * v for w, v in zip(widths, values)) / max(sum(values), floor)
        else:
            width = max(widths)
        return Band(width, "; ".join(dict.fromkeys(sources)))


class BandsError(ValueError):
    """noise_bands.toml is malformed: the message names the file, the entry and the field."""


@lru_cache(maxsize=2)
def load_bands(path: Path = BANDS_FILE) -> NoiseBands:
    name = Path(path).name
    data = read_toml(path, "noise bands", BandsError)
    margin = data.get("margin", {})
    counter: dict[str, tuple[float, str]] = {}
    case: dict[tuple[str, str], tuple[float, str]] = {}
    for kind, table in (("counter", counter), ("case", case)):
        for index, entry in enumerate(data.get(kind, [])):
            try:
                spread, source = (
                    float(entry["spread"]),
                    str(entry["source"])
                    if kind == "counter"
                    else str(entry.get("source", "scripts/explain_check.py A/A")),
                )
                key: Any = (
                    entry["counter"] if kind == "counter" else (entry["case"], entry["counter"])
                )  # the table's key
            except (KeyError, TypeError, ValueError) as exc:
                raise BandsError(f"{name}: {kind} {index}: missing or bad field {exc}") from None
            if not math.isfinite(spread) or spread < 0 or not source.strip():
                raise BandsError(f"{name}: {kind} {index}: spread must be finite and >= 0, source non-empty")
            if kind == "counter" and key in table:
                raise BandsError(f"{name}: counter {key!r} listed twice")
            if key not in table or spread > table[key][0]:  # a case measured by two A/As: the wider
                table[key] = (spread, source)
    try:
        return NoiseBands(
            counter,
            case,
            float(margin.get("counter", 1.5)),
            float(margin.get("case", 3.0)),
            float(margin.get("case_floor", 0.01)),
        )
    except (TypeError, ValueError) as exc:
        raise BandsError(f"{name}: [margin]: {exc}") from None


def spreads(profiles: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """counter -> the largest |a - b| / |a| over every pair of profiles of one build (0 when equal;
    a counter whose base is 0 is left out unless both are 0)."""
    out: dict[str, float] = {}
    for a, b in itertools.combinations(profiles, 2):
        for name in set(a) & set(b):
            x, y = a[name], b[name]
            if not (_finite(x) and _finite(y)):
                continue
            if x == y:
                out.setdefault(name, 0.0)
            elif x != 0:
                out[name] = max(out.get(name, 0.0), abs(y - x) / abs(x))
    return out


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)
