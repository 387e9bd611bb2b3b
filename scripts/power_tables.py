"""What the detection-power tables share (scripts/detection_power.py, scripts/compare_replay.py):
the injected slowdowns, the Wilson interval each cell carries and the run's closing line."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

SLOWDOWNS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pct(hits: int, total: int) -> str:
    low, high = wilson(hits, total)
    return f"{100 * hits / total:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def finish(out: dict, started: float, json_path: Path | None) -> int:
    """Prints the run's seconds and the tables' interval note; writes `out` to `json_path` if given."""
    out["seconds"] = time.time() - started
    print(f"\n({out['seconds']:.0f} s; percentages with Wilson 95% intervals)")
    if json_path:
        json_path.write_text(json.dumps(out, indent=1))
    return 0
