"""A validated run, ready to ingest: typed records, no raw JSON left.

Both a bundle directory (history.contract.validate) and a plain pytest-benchmark file
(history.contract.pytest_benchmark_import) become a LoadedBundle, so ingest has one input type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from attnwatch.history.contract.bundle import (
    BuildRecord,
    CaseOutcome,
    CaseTiming,
    CorrectnessRecord,
    Manifest,
    NcuCaseMetrics,
    NcuKernelRow,
)
from attnwatch.history.contract.sass_file import SassRecords


@dataclass
class HostStats:
    """pytest-benchmark's own statistics of one benchmark, converted from seconds to microseconds."""

    rounds: int | None
    iterations: int | None
    median_us: float | None
    mean_us: float | None
    stddev_us: float | None
    min_us: float | None
    max_us: float | None
    iqr_us: float | None
    q1_us: float | None
    q3_us: float | None


@dataclass
class BenchmarkEntry:
    """One pytest-benchmark entry: its names, host statistics, and the case it timed."""

    name: str
    fullname: str
    group: str | None
    host: HostStats
    # The attnwatch case this entry timed (extra_info["attnwatch_case"], or the case of a format-1
    # timing it carried); None for a plain pytest-benchmark entry, keyed by its fullname.
    case_id: str | None


@dataclass
class LoadedBundle:
    source_path: str
    source: str  # "bundle" | "pytest-benchmark"
    manifest: Manifest
    content_sha256: str
    pytest_benchmark_version: str | None
    benchmarks: list[BenchmarkEntry]
    outcomes: list[CaseOutcome]
    timings: list[CaseTiming] = field(default_factory=list)  # GPU statistics, one per timed case
    correctness: list[CorrectnessRecord] = field(default_factory=list)
    builds: list[BuildRecord] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    # Each sample's SM clock (MHz, None where none was read), for the cases whose recipe
    # recorded clocks (samples.json v2); aligned with `samples`.
    sample_clocks: dict[str, list[float | None]] = field(default_factory=dict)
    ncu_kernels: list[NcuKernelRow] = field(default_factory=list)
    ncu_cases: list[NcuCaseMetrics] = field(default_factory=list)
    ncu_version: str | None = None
    sass: SassRecords | None = None  # sass.json: the static code of the profiled variants' binaries
