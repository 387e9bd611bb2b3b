"""The fixed ncu metric list (metrics.toml), and the other columns ncu is expected to print
(known_columns.toml). The measured ceilings live in history/analysis/ceilings.toml."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from attnwatch.toml_reader import read_toml

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
    section: str
    details: str | None = None
    instanced: bool = False  # one value per instance (per opcode): printed with --print-metric-instances
    # evidence read where present: a recording or an ncu without the column is not a failed case
    # (instanced metrics are always optional)
    optional: bool = False


def optional_metrics() -> frozenset[str]:
    """Metrics whose absence is evidence not available, never a case's `missing` (ci.ncu.parse)."""
    return frozenset(spec.metric for spec in metric_specs() if spec.instanced or spec.optional)


@dataclass(frozen=True)
class Section:
    """A named part of the metric list, collected together: `default` ones unless told otherwise,
    `explain` ones added to them when a profile must explain a judged case."""

    name: str
    default: bool
    explain: bool
    cost: str  # what it was measured to cost per case, or that it was not measured
    reason: str


@dataclass(frozen=True)
class ReplaySettings:
    """How ncu replays a kernel and what it does to the caches between passes ([profile])."""

    replay_mode: str
    cache_control: str


REPLAY_MODES = ("kernel", "application", "range")
CACHE_CONTROLS = ("all", "none")


@lru_cache(maxsize=1)
def _data() -> dict:
    return read_toml(_HERE / "metrics.toml", "ncu metrics", ValueError)


@lru_cache(maxsize=1)
def replay_settings() -> ReplaySettings:
    """metrics.toml [profile]: the replay mode and cache control every ncu process uses."""
    entry = _data()["profile"]
    settings = ReplaySettings(entry["replay_mode"], entry["cache_control"])
    for name, value, allowed in (
        ("replay_mode", settings.replay_mode, REPLAY_MODES),
        ("cache_control", settings.cache_control, CACHE_CONTROLS),
    ):
        if value not in allowed or not entry.get(f"{name}_reason"):
            raise ValueError(f"metrics.toml: [profile] {name}: {value!r} not in {allowed}, or no {name}_reason")
    return settings


@lru_cache(maxsize=1)
def _load() -> tuple[tuple[Section, ...], tuple[MetricSpec, ...]]:
    """The sections and the metric list, validated: an unknown combine rule or section, or a
    duplicate field, is a bug in the file."""
    data = _data()
    sections = tuple(Section(**entry) for entry in data["section"])
    names = {s.name for s in sections}
    specs = tuple(MetricSpec(**entry) for entry in data["metric"])
    seen: set[str] = set()
    for spec in specs:
        if spec.combine not in COMBINE_RULES:
            raise ValueError(f"metrics.toml: {spec.field}: combine {spec.combine!r} not in {COMBINE_RULES}")
        if spec.section not in names:
            raise ValueError(f"metrics.toml: {spec.field}: section {spec.section!r} is not a [[section]]")
        if spec.field in seen:
            raise ValueError(f"metrics.toml: field {spec.field!r} listed twice")
        seen.add(spec.field)
    return sections, specs


def metric_specs() -> tuple[MetricSpec, ...]:
    """Every metric on the list, whatever its section (the parser and aggregation read by these)."""
    return _load()[1]


def sections() -> tuple[Section, ...]:
    return _load()[0]


EXPLAIN = "explain"  # the list name for the default sections and the explain ones


def choose_sections(names: str | None) -> tuple[str, ...]:
    """Comma-separated section names, or the default sections for None/"" ("all": every one;
    "explain": the default ones and those a judged case's explanation needs, every counter a
    counter rule reads).

    Raises ValueError naming the unknown section, for the CLI's one-line error.
    """
    known = [s.name for s in sections()]
    if not names:
        return tuple(s.name for s in sections() if s.default)
    if names == "all":
        return tuple(known)
    if names == EXPLAIN:
        return tuple(s.name for s in sections() if s.default or s.explain)
    chosen = tuple(n.strip() for n in names.split(",") if n.strip())
    for name in chosen:
        if name not in known:
            raise ValueError(
                f"unknown ncu section {name!r} (ci/ncu/metrics.toml has {', '.join(known)}; or all, {EXPLAIN})"
            )
    return chosen


def specs_in(chosen: tuple[str, ...] | None = None) -> tuple[MetricSpec, ...]:
    """The metrics the chosen sections collect (default sections for None)."""
    chosen = chosen if chosen is not None else choose_sections(None)
    return tuple(spec for spec in metric_specs() if spec.section in chosen)


def instanced_metrics(chosen: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The chosen sections' metrics that ncu reports per instance: the import then needs
    `--print-metric-instances details`, which names each instance (ci/ncu/parse.py)."""
    return tuple(spec.metric for spec in specs_in(chosen) if spec.instanced)


def metrics_argument(chosen: tuple[str, ...] | None = None) -> str:
    """The comma-separated list for `ncu --metrics` (the chosen sections; default ones for None)."""
    return ",".join(spec.metric for spec in specs_in(chosen))


@lru_cache(maxsize=1)
def known_column_prefixes() -> tuple[str, ...]:
    """Prefixes of the raw-page columns that are expected besides the metric list; each entry has a reason."""
    data = read_toml(_HERE / "known_columns.toml", "known ncu columns", ValueError)
    for entry in data["known"]:
        if not entry.get("prefix") or not entry.get("reason"):
            raise ValueError(f"known_columns.toml: every entry needs a prefix and a reason: {entry}")
    return tuple(entry["prefix"] for entry in data["known"])
