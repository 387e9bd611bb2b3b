"""The fixed ncu metric list (metrics.toml), and the other columns ncu is expected to print
(known_columns.toml). The measured ceilings live in history/analysis/ceilings.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent
COMBINE_RULES = ("sum", "weighted", "max")


@dataclass(frozen=True)
class MetricSpec:
    field: str
    metric: str
    unit: str
    scale: float
    combine: str
    reason: str
    details: str | None = None


@lru_cache(maxsize=1)
def metric_specs() -> tuple[MetricSpec, ...]:
    """The metric list, validated: unknown combine rules or duplicate fields are a bug in the file."""
    data = tomllib.loads((_HERE / "metrics.toml").read_text(encoding="utf-8"))
    specs = tuple(MetricSpec(**entry) for entry in data["metric"])
    seen: set[str] = set()
    for spec in specs:
        if spec.combine not in COMBINE_RULES:
            raise ValueError(f"metrics.toml: {spec.field}: combine {spec.combine!r} not in {COMBINE_RULES}")
        if spec.field in seen:
            raise ValueError(f"metrics.toml: field {spec.field!r} listed twice")
        seen.add(spec.field)
    return specs


def metrics_argument() -> str:
    """The comma-separated list for `ncu --metrics`."""
    return ",".join(spec.metric for spec in metric_specs())


@lru_cache(maxsize=1)
def known_column_prefixes() -> tuple[str, ...]:
    """Prefixes of the raw-page columns that are expected besides the metric list; each entry has a reason."""
    data = tomllib.loads((_HERE / "known_columns.toml").read_text(encoding="utf-8"))
    for entry in data["known"]:
        if not entry.get("prefix") or not entry.get("reason"):
            raise ValueError(f"known_columns.toml: every entry needs a prefix and a reason: {entry}")
    return tuple(entry["prefix"] for entry in data["known"])
