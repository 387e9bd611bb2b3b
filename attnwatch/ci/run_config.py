"""The run's configuration, read from `ci/run_config.toml` (every entry has its reason there).

This module is the one reader of that file: a dataclass whose field has a default from it
declares the field with `configured(...)` (or resolves it from the device kind when an instance
is made), so no number in the TOML is written a second time in the code.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from attnwatch.toml_reader import read_toml

CONFIG_PATH = Path(__file__).resolve().parent / "run_config.toml"


@dataclass(frozen=True)
class TimingConfig:
    """How the timing engine samples one interleaved group (see ci/timing/sampler.py)."""

    target_rel_spread: float
    min_samples: int
    max_samples: int
    block_calls: int
    time_cap_s: float
    warmup_calls: int
    warmup_min_s: float
    flush_l2_multiple: float
    graph_threshold_us: float
    graph_calls: int
    graph_replays: int
    host_rounds: int
    input_sets: int
    input_sets_max_bytes: int
    streams: int
    recipe: str
    clock_record: bool
    pacing: str
    pacing_duty: float
    pacing_power_margin: float
    pacing_min_call_us: float
    clock_band: float
    reference_clock_mhz: float

    def __post_init__(self) -> None:
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError(
                f"timing config: need 1 <= min_samples <= max_samples, got {self.min_samples}, {self.max_samples}"
            )
        if self.block_calls < 1:
            raise ValueError("timing config: block_calls must be >= 1")
        if self.host_rounds < 1:
            raise ValueError("timing config: host_rounds must be >= 1")
        if self.input_sets < 1:
            raise ValueError("timing config: input_sets must be >= 1")
        if self.streams < 1:
            raise ValueError("timing config: streams must be >= 1")
        if self.pacing not in ("none", "duty", "power"):
            raise ValueError(f"timing config: pacing must be none, duty or power, got {self.pacing!r}")
        if not 0 < self.pacing_duty <= 1 or not 0 < self.pacing_power_margin <= 1:
            raise ValueError("timing config: pacing_duty and pacing_power_margin must be in (0, 1]")
        if self.pacing_min_call_us < 0:
            raise ValueError("timing config: pacing_min_call_us must be >= 0")
        if self.clock_band < 0 or self.reference_clock_mhz < 0:
            raise ValueError("timing config: clock_band and reference_clock_mhz must be >= 0")
        if (self.clock_band > 0 or self.pacing != "none") and not self.clock_record:
            raise ValueError(
                "timing config: clock_band and pacing need clock_record (the stored clocks say what they did)"
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TimingConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"timing config: unknown keys {sorted(unknown)}")
        return cls(**data)

    def with_overrides(self, **changes: Any) -> "TimingConfig":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    return read_toml(CONFIG_PATH, "run configuration", ValueError)


def timing_config(device_kind: str) -> TimingConfig:
    """Defaults for "cuda" or "cpu"."""
    section = _raw()["timing"]
    if device_kind not in section:
        raise ValueError(f"{CONFIG_PATH.name}: no [timing.{device_kind}] section")
    return TimingConfig.from_dict(dict(section[device_kind]))


def recipes() -> list[str]:
    """The recipe names a run may ask for: "plain" and each [timing.recipes.NAME]."""
    return ["plain", *sorted(_raw()["timing"].get("recipes", {}))]


def with_recipe(config: TimingConfig, name: str) -> TimingConfig:
    """`config` with [timing.recipes.NAME]'s overrides and `recipe` = NAME ("plain": unchanged
    but for the name). An unknown name is a one-line error naming the file."""
    table = _raw()["timing"].get("recipes", {})
    if name != "plain" and name not in table:
        raise ValueError(f"{CONFIG_PATH.name}: no [timing.recipes.{name}] (known: {', '.join(recipes())})")
    overrides = dict(table.get(name, {}))
    unknown = set(overrides) - {f.name for f in fields(TimingConfig)}
    if unknown:
        raise ValueError(f"{CONFIG_PATH.name}: [timing.recipes.{name}]: unknown keys {sorted(unknown)}")
    return replace(config, recipe=name, **overrides)


def default_recipe(shape_set: str) -> str:
    """The recipe a shape set runs with ([defaults.recipe])."""
    return str(setting("defaults.recipe", shape_set))


def setting(section: str, name: str) -> Any:
    """`[section] name` (a dotted section for a table inside another: "compare.cuda")."""
    table: Any = _raw()
    for part in section.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    if not isinstance(table, dict) or name not in table:
        raise KeyError(f"{CONFIG_PATH.name}: no {name} in [{section}]")
    return table[name]


def default(name: str) -> Any:
    """A [defaults] entry."""
    return setting("defaults", name)


def configured(name: str, section: str = "defaults") -> Any:
    """A dataclass field whose default is `[section] name`, read (and copied, so that no two
    instances share a list) each time an instance is made without it."""
    return field(default_factory=lambda: copy.deepcopy(setting(section, name)))


def case_timeout(device_kind: str) -> float:
    """Journal silence after which a case is killed: [defaults] case_timeout_<device kind>_s."""
    return float(default(f"case_timeout_{device_kind}_s"))


def default_dtypes(shape_set: str) -> list[str]:
    """The dtypes a shape set runs in ([defaults.dtypes]; "custom" for shapes named one by one)."""
    return list(setting("defaults.dtypes", shape_set))


def compare_setting(name: str) -> Any:
    """A [compare] entry: min_rounds, max_rounds, method, resamples, ncu_budget_s."""
    return setting("compare", name)


def compare_sampling(device_kind: str) -> dict[str, Any]:
    """TimingConfig overrides for one compare round per case ([compare.<device kind>])."""
    section = _raw()["compare"]
    if device_kind not in section:
        raise ValueError(f"{CONFIG_PATH.name}: no [compare.{device_kind}] section")
    return {k: v for k, v in section[device_kind].items() if k != "workers_per_side"}


def compare_workers_per_side(device_kind: str) -> int:
    """How many warm workers each side of a compare keeps ([compare.<device kind>] workers_per_side)."""
    return int(setting(f"compare.{device_kind}", "workers_per_side"))
