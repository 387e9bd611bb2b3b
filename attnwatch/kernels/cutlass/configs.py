"""The CUTLASS 3-kernel tile configurations and limits, read from ``tiles.toml``.

Each configuration becomes one shared library and one variant ``cutlass_3k_<name>``. The
file is data with a reason per entry (why this tile is in the sweep, why a limit exists);
a malformed entry raises TileConfigError naming the file and the field.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from attnwatch.toml_reader import read_toml

TILES_PATH = Path(__file__).resolve().with_name("tiles.toml")

# CUTLASS kernel schedule names -> the ATTN3K_SCHEDULE code understood by attention_3k.cu.
SCHEDULES = {"warpspecialized": 1, "pingpong": 2, "cooperative": 3}
SCHEDULE_CLASSES = {
    "warpspecialized": "KernelTmaWarpSpecialized",
    "pingpong": "KernelTmaWarpSpecializedPingpong",
    "cooperative": "KernelTmaWarpSpecializedCooperative",
}
_NAME_RE = re.compile(r"[0-9a-z_]+")


class TileConfigError(ValueError):
    """tiles.toml is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class TileConfig:
    """One build of the pipeline: CTA tile (M, N, K) of both GEMMs, cluster, kernel schedule."""

    name: str
    tile: tuple[int, int, int]
    cluster_m: int
    schedule: str
    reason: str
    stages: int | None = None  # None: CUTLASS's automatic count (all shared memory left after the epilogue)

    @property
    def variant_name(self) -> str:
        return f"cutlass_3k_{self.name}"

    def defines(self) -> list[str]:
        """The preprocessor definitions that select this configuration in attention_3k.cu."""
        m, n, k = self.tile
        return [
            f"-DATTN3K_TILE_M={m}",
            f"-DATTN3K_TILE_N={n}",
            f"-DATTN3K_TILE_K={k}",
            f"-DATTN3K_CLUSTER_M={self.cluster_m}",
            f"-DATTN3K_SCHEDULE={SCHEDULES[self.schedule]}",
            *([f"-DATTN3K_STAGES={self.stages}"] if self.stages is not None else []),
        ]

    def describe(self) -> dict[str, object]:
        return {
            "tile_mnk": list(self.tile),
            "cluster_mnk": [self.cluster_m, 1, 1],
            "schedule": SCHEDULE_CLASSES[self.schedule],
            "stages": self.stages if self.stages is not None else "auto",
        }


@dataclass(frozen=True)
class Limits:
    memory_share: float
    head_dim_multiple: int
    max_rows: int


_T = TypeVar("_T")


def _field(entry: dict, key: str, where: str, kind: type[_T]) -> _T:
    if key not in entry:
        raise TileConfigError(f"{where}.{key}: missing")
    value = entry[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TileConfigError(f"{where}.{key}: must be {kind.__name__}, got {value!r}")
    return value


def _parse_config(entry: object, where: str) -> TileConfig:
    if not isinstance(entry, dict):
        raise TileConfigError(f"{where}: must be a table")
    unknown = set(entry) - {"name", "tile", "cluster_m", "schedule", "reason", "stages"}
    if unknown:
        raise TileConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name = _field(entry, "name", where, str)
    if not _NAME_RE.fullmatch(name):
        raise TileConfigError(f"{where}.name: only lowercase letters, digits and '_' allowed, got {name!r}")
    tile = _field(entry, "tile", where, list)
    if len(tile) != 3 or not all(isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in tile):
        raise TileConfigError(f"{where}.tile: must be three positive ints [M, N, K], got {tile!r}")
    if tile[0] not in (64, 128, 256) or tile[1] % 8 or tile[2] % 16:
        raise TileConfigError(f"{where}.tile: wgmma needs M in (64, 128, 256), N % 8 == 0, K % 16 == 0; got {tile!r}")
    cluster_m = _field(entry, "cluster_m", where, int)
    if cluster_m not in (1, 2, 4):
        raise TileConfigError(f"{where}.cluster_m: must be 1, 2 or 4, got {cluster_m!r}")
    schedule = _field(entry, "schedule", where, str)
    if schedule not in SCHEDULES:
        raise TileConfigError(f"{where}.schedule: must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if schedule == "cooperative" and tile[0] < 128:
        raise TileConfigError(f"{where}.schedule: cooperative splits M over two warpgroups and needs tile M >= 128")
    reason = _field(entry, "reason", where, str)
    if not reason.strip():
        raise TileConfigError(f"{where}.reason: every configuration needs a reason")
    stages = None
    if "stages" in entry:
        stages = _field(entry, "stages", where, int)
        if not 2 <= stages <= 32:
            raise TileConfigError(
                f"{where}.stages: must be an int in [2, 32] (a TMA pipeline needs two), got {stages!r}"
            )
    return TileConfig(name, (tile[0], tile[1], tile[2]), cluster_m, schedule, reason.strip(), stages)


def load(path: Path | str = TILES_PATH) -> tuple[list[TileConfig], Limits]:
    """All configurations (file order) and the limits; TileConfigError on malformed data."""
    path = Path(path)
    data = read_toml(path, "tile configurations", TileConfigError)
    entries = data.get("config")
    if not isinstance(entries, list) or not entries:
        raise TileConfigError(f"{path}: [[config]] entries missing")
    configs = [_parse_config(entry, f"{path}: config[{i}]") for i, entry in enumerate(entries)]
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise TileConfigError(f"{path}: config.name repeated: {', '.join(duplicates)}")
    limits = data.get("limits")
    if not isinstance(limits, dict):
        raise TileConfigError(f"{path}: [limits] table missing")
    where = f"{path}: limits"
    for key in ("memory_share", "head_dim_multiple", "max_rows"):
        reason = limits.get(f"{key}_reason")
        if not isinstance(reason, str) or not reason.strip():
            raise TileConfigError(f"{where}.{key}_reason: every limit needs a reason")
    share = limits.get("memory_share")
    if not isinstance(share, float) or not 0 < share <= 1:
        raise TileConfigError(f"{where}.memory_share: must be a float in (0, 1], got {share!r}")
    multiple = _field(limits, "head_dim_multiple", where, int)
    max_rows = _field(limits, "max_rows", where, int)
    return configs, Limits(share, multiple, max_rows)


@functools.lru_cache(maxsize=1)
def default() -> tuple[tuple[TileConfig, ...], Limits]:
    """The shipped tiles.toml, parsed once per process."""
    configs, limits = load()
    return tuple(configs), limits


def padded_ld(seq_len: int) -> int:
    """Leading dimension of the S and P rows: S rounded up to 8 elements (16 bytes, for TMA)."""
    return (seq_len + 7) // 8 * 8
