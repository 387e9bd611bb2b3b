"""Measured roofline ceilings (compute TFLOP/s per dtype, DRAM TB/s) per GPU, from ceilings.toml.

Every number in the file must carry a `<name>_reason` saying where it was measured; a
ceiling without provenance is refused rather than drawn.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CEILINGS_FILE = Path(__file__).resolve().parent.parent / "ceilings.toml"


class CeilingsError(Exception):
    """The ceilings file is malformed or a value lacks its provenance."""


@dataclass(frozen=True)
class Ceilings:
    gpu: str
    tflops: dict[str, float]  # dtype -> measured dense GEMM TFLOP/s
    dram_tbps: float
    measured_on: str
    reasons: dict[str, str]

    def peak_for(self, dtype: str) -> float | None:
        return self.tflops.get(dtype)


def load_ceilings(gpu: str, path: Path = CEILINGS_FILE) -> Ceilings | None:
    """The measured ceilings of `gpu`, or None when none were recorded for it."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CeilingsError(f"{path}: cannot read ceilings: {exc}") from None
    section = data.get("gpu", {}).get(gpu)
    if section is None:
        return None
    reasons: dict[str, str] = {}
    numbers: dict[str, float] = {}
    for key, value in section.items():
        if key.endswith("_reason") or key == "measured_on":
            continue
        reason = section.get(f"{key}_reason")
        if not isinstance(reason, str) or not reason.strip():
            raise CeilingsError(f'{path}: [gpu."{gpu}"].{key}_reason: every ceiling needs its provenance')
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise CeilingsError(f'{path}: [gpu."{gpu}"].{key}: expected a positive number, got {value!r}')
        numbers[key] = float(value)
        reasons[key] = reason
    if "dram_tbps" not in numbers:
        raise CeilingsError(f'{path}: [gpu."{gpu}"].dram_tbps: missing')
    tflops = {k.removesuffix("_tflops"): v for k, v in numbers.items() if k.endswith("_tflops")}
    return Ceilings(gpu, tflops, numbers["dram_tbps"], str(section.get("measured_on", "")), reasons)
