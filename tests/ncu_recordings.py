"""The recorded ncu profiles of tests/data/ncu read the way the explanation reads them: each
case's kernels (by the NVTX range ncu printed) and their launches with their counters."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

from attnwatch.ci.ncu.parse import ParsedKernel, parse_ncu_csv
from attnwatch.history.analysis.kernel_launches import Launch, launch_counters
from attnwatch.history.analysis.ncu_explain import DURATION


def recorded_text(path: Path) -> str:
    """A recording's text, gunzipped when it is kept gzipped."""
    data = Path(path).read_bytes()
    return (gzip.decompress(data) if Path(path).suffix == ".gz" else data).decode("utf-8")


def kernels_by_case(path: Path) -> dict[str, list[ParsedKernel]]:
    out = defaultdict(list)
    for kernel in parse_ncu_csv(Path(path).name, text=recorded_text(path)).kernels:
        out[kernel.nvtx_range].append(kernel)
    return dict(out)


def launches(kernels) -> list[Launch]:
    return [Launch(k.kernel_name, k.metrics.get(DURATION), launch_counters(k.metrics)) for k in kernels]
