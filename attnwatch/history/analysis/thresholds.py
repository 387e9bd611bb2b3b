"""Per-GPU regression thresholds, read from `history/analysis/thresholds.toml`.

Every numeric setting in the file must come with a `<name>_reason` string: a threshold nobody
can explain is one nobody can trust or tune. A GPU section overrides [default] key by key.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from pathlib import Path

from attnwatch.history.errors import HistoryError
from attnwatch.toml_reader import read_toml

# The repository's own file; `--thresholds` or $ATTNWATCH_THRESHOLDS select another.
REPO_THRESHOLDS = Path(__file__).resolve().parent / "thresholds.toml"


class ThresholdsError(HistoryError):
    """The thresholds file is missing, malformed, or a value lacks its reason."""


@dataclass(frozen=True)
class Thresholds:
    """What counts as a regression on one GPU.

    min_effect: smallest relative slowdown reported (0.02 = 2%); confidence: of the head/base
    interval (a compare's paired t, the Compare page's bootstrap); min_persist: runs a
    main-branch step must hold; penalty_scale and sigma_floor: the change-point penalty (see
    history.analysis.changepoints); min_series: shortest series scanned;
    resolve_after: consecutive runs back within min_effect that resolve an alert
    (history.detection.recovery).
    """

    gpu: str
    min_effect: float
    confidence: float
    min_persist: int
    penalty_scale: float
    sigma_floor: float
    min_series: int
    resolve_after: int


_NUMERIC = {f.name for f in fields(Thresholds)} - {"gpu"}
_RANGES = {
    "min_effect": (0.0, 1.0),
    "confidence": (0.5, 0.9999),
    "min_persist": (1, 1000),
    "penalty_scale": (0.0, 1000.0),
    "sigma_floor": (0.0, 1.0),
    "min_series": (2, 100000),
    "resolve_after": (1, 1000),
}


def _check_section(path: Path, name: str, section: object, require_all: bool) -> dict:
    if not isinstance(section, dict):
        raise ThresholdsError(f"{path}: [{name}]: expected a table")
    values: dict = {}
    for key, value in section.items():
        if key.endswith("_reason"):
            continue
        if key not in _NUMERIC:
            raise ThresholdsError(f"{path}: [{name}].{key}: unknown setting (known: {', '.join(sorted(_NUMERIC))})")
        reason = section.get(f"{key}_reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ThresholdsError(f"{path}: [{name}].{key}_reason: every setting needs a reason")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ThresholdsError(f"{path}: [{name}].{key}: expected a finite number, got {value!r}")
        low, high = _RANGES[key]
        if not low <= value <= high:
            raise ThresholdsError(f"{path}: [{name}].{key}: {value} outside [{low}, {high}]")
        if key in ("min_persist", "min_series", "resolve_after") and int(value) != value:
            raise ThresholdsError(f"{path}: [{name}].{key}: expected an integer, got {value!r}")
        values[key] = value
    missing = _NUMERIC - values.keys()
    if require_all and missing:
        raise ThresholdsError(f"{path}: [{name}]: missing {', '.join(sorted(missing))}")
    return values


def thresholds_path(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("ATTNWATCH_THRESHOLDS")
    return Path(env) if env else REPO_THRESHOLDS


def load_thresholds(gpu_name: str | None, path: str | Path | None = None) -> Thresholds:
    """Thresholds for `gpu_name` (exact recorded name), falling back to [default]."""
    file = thresholds_path(path)
    data = read_toml(file, "thresholds", ThresholdsError)
    unknown = set(data) - {"default", "gpu"}
    if unknown:
        raise ThresholdsError(f'{file}: unknown sections {sorted(unknown)} (expected [default] and [gpu."NAME"])')
    merged = _check_section(file, "default", data.get("default"), require_all=True)
    gpus = data.get("gpu", {})
    if not isinstance(gpus, dict):
        raise ThresholdsError(f"{file}: [gpu]: expected tables named by GPU")
    for name, section in gpus.items():
        values = _check_section(file, f'gpu."{name}"', section, require_all=False)
        if name == gpu_name:
            merged.update(values)
    return Thresholds(
        gpu=gpu_name or "default",
        min_effect=float(merged["min_effect"]),
        confidence=float(merged["confidence"]),
        min_persist=int(merged["min_persist"]),
        penalty_scale=float(merged["penalty_scale"]),
        sigma_floor=float(merged["sigma_floor"]),
        min_series=int(merged["min_series"]),
        resolve_after=int(merged["resolve_after"]),
    )
