"""Measured roofline ceilings (history/analysis/ceilings.toml): dense GEMM TFLOP/s per dtype and DRAM
copy TB/s, per GPU.

One home for both readers: CI stores "percent of peak" against these when it profiles a case,
and the dashboard draws the same numbers as the roofline's roofs, so the two can never
disagree. Every entry must say how and where it was measured; an entry without provenance, a
non-positive value, an unknown kind or a duplicate is refused with the file and field named,
rather than silently used.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from attnwatch.history.errors import HistoryError
from attnwatch.toml_reader import read_toml

CEILINGS_FILE = Path(__file__).resolve().parent / "ceilings.toml"

# kind -> unit of its value
KINDS = {"matmul_tflops": "TFLOP/s", "copy_tbps": "TB/s"}
ANY_DTYPE = "any"


class CeilingsError(HistoryError):
    """The ceilings file is malformed or an entry lacks its provenance."""


@dataclass(frozen=True)
class Ceiling:
    gpu: str  # exact GPU name as the harness records it
    kind: str  # a key of KINDS
    dtype: str  # "fp16", "bf16", ... or "any"
    value: float  # in KINDS[kind]
    how: str  # the measurement: workload, library, statistic
    measured: str  # where and when: machine, driver, versions, date, where the raw figure is kept

    @property
    def unit(self) -> str:
        return KINDS[self.kind]

    @property
    def provenance(self) -> str:
        return f"{self.how} Measured on {self.measured}"


def load_ceilings(path: Path = CEILINGS_FILE) -> tuple[Ceiling, ...]:
    """Every ceiling in `path`, validated (see the module docstring)."""
    data = read_toml(path, "ceilings", CeilingsError)
    entries = data.get("ceiling")
    if not isinstance(entries, list):
        raise CeilingsError(f"{path}: ceiling: expected a list of [[ceiling]] tables")
    names = [f.name for f in fields(Ceiling)]
    found: list[Ceiling] = []
    seen: set[tuple[str, str, str]] = set()
    for index, entry in enumerate(entries):
        where = f"{path}: ceiling[{index}]"
        if not isinstance(entry, dict):
            raise CeilingsError(f"{where}: expected a table, got {entry!r}")
        unknown = sorted(set(entry) - set(names))
        if unknown:
            raise CeilingsError(f"{where}.{unknown[0]}: unknown field (expected {', '.join(names)})")
        for name in ("gpu", "kind", "dtype", "how", "measured"):
            text = entry.get(name)
            if not isinstance(text, str) or not text.strip():
                why = "every ceiling needs its provenance" if name in ("how", "measured") else "required text"
                raise CeilingsError(f"{where}.{name}: {why}")
        if entry["kind"] not in KINDS:
            raise CeilingsError(f"{where}.kind: {entry['kind']!r} is not one of {', '.join(KINDS)}")
        value = entry.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise CeilingsError(f"{where}.value: expected a positive number, got {value!r}")
        key = (entry["gpu"], entry["kind"], entry["dtype"])
        if key in seen:
            raise CeilingsError(f"{where}: {key[0]} {key[1]} {key[2]} is listed twice")
        seen.add(key)
        found.append(Ceiling(**{**entry, "value": float(value)}))
    return tuple(found)


@lru_cache(maxsize=4)
def ceilings(path: Path = CEILINGS_FILE) -> tuple[Ceiling, ...]:
    """The shipped ceilings (read once per process)."""
    return load_ceilings(path)


def find_ceiling(gpu: str | None, kind: str, dtype: str = ANY_DTYPE, path: Path = CEILINGS_FILE) -> Ceiling | None:
    """The measured ceiling of this kind for this GPU and dtype, preferring an exact dtype over
    one recorded for any dtype; None when it was never measured (no datasheet fallback)."""
    if kind not in KINDS:
        raise CeilingsError(f"{path}: kind: {kind!r} is not one of {', '.join(KINDS)}")
    if not gpu:
        return None
    matches = [c for c in ceilings(path) if c.gpu == gpu and c.kind == kind and c.dtype in (dtype, ANY_DTYPE)]
    exact = [c for c in matches if c.dtype == dtype]
    return exact[0] if exact else matches[0] if matches else None


def achieved_bandwidth(
    bytes_moved: float, median_us: float, gpu: str | None, dtype: str = ANY_DTYPE
) -> tuple[float, float | None]:
    """(achieved GB/s, its share of the GPU's measured DRAM copy bandwidth) of a memory-bound case:
    the operator's byte model (the fewest bytes one call moves) over the median time. The share is
    None where no copy bandwidth was measured for that GPU (find_ceiling)."""
    gbps = bytes_moved / median_us / 1e3  # bytes/µs = MB/s
    roof = find_ceiling(gpu, "copy_tbps", dtype)
    return gbps, (gbps / (roof.value * 1e3) if roof is not None else None)
