"""The run bundle: the interchange format between a GPU runner and the history.

A bundle is a directory of JSON files, each carrying `schema` and `schema_version`:

    manifest.json      Manifest: who, what commit, where, when, environment, status
    timings.json       one CaseTiming (GPU statistics) per timed case
    benchmark.json     the pytest-benchmark JSON of the harness's host timing, as pytest-benchmark
                       writes it; each entry names the case it timed in
                       `extra_info["attnwatch_case"]` (no entries when no host timing ran)
    outcomes.json      one CaseOutcome per planned case: ok / failed / crashed / timeout /
                       skipped / unsupported, with the error; cases that never reached
                       pytest-benchmark (a crash) are recorded here and nowhere else
    correctness.json   CorrectnessRecord list
    builds.json        BuildRecord list
    samples.json       raw per-call samples (microseconds) per case id, and each sample's SM
                       clock where the run's recipe recorded it
    ncu.json           optional: NcuKernelRow list (per kernel) and NcuCaseMetrics (per case)
    ncu_raw.csv        optional: the CSV ncu printed, kept verbatim
    sass.json          optional, with the ncu pass: the static code of the profiled variants'
                       binaries, by digest (history.contract.sass_file, its one writer and reader)

Each result is stored once: a case's GPU timing in timings.json, its samples in samples.json,
pytest-benchmark's host measurement in benchmark.json.

Top-level layout of each JSON file (every one an object with `schema` and `schema_version`;
the current version of each is in SCHEMA_VERSIONS, older ones are upgraded on reading by the
functions in history.contract.bundle_upgrades):

    manifest.json      {"schema": "attnwatch.manifest", "schema_version": 4, ...Manifest fields}
                       (its version is the bundle's format: format 1 kept each CaseTiming in
                       benchmark.json's `extra_info["attnwatch"]`; history.contract.timings upgrades it)
    timings.json       {"schema": "attnwatch.timings", "schema_version": 1, "timings": [CaseTiming]}
    benchmark.json     pytest-benchmark's own layout: {"machine_info", "commit_info",
                       "benchmarks": [{..., "stats": {...seconds...},
                       "extra_info": {"attnwatch_case": case id, ...}}], "datetime", "version"}
                       (pytest-benchmark writes no schema keys: its "version" identifies it)
    outcomes.json      {"schema": "attnwatch.outcomes", "schema_version": 1, "cases": [CaseOutcome]}
    correctness.json   {"schema": "attnwatch.correctness", "schema_version": 2, "records": [CorrectnessRecord]}
    builds.json        {"schema": "attnwatch.builds", "schema_version": 2, "builds": [BuildRecord]}
    samples.json       {"schema": "attnwatch.samples", "schema_version": 2, "unit": "us",
                        "samples": {case_id: [float, ...]},
                        "sm_clock_mhz": {case_id: [float | null, ...]}}  (v2; only the cases
                        whose recipe recorded clocks, one per sample, null where none was read)
    ncu.json           {"schema": "attnwatch.ncu", "schema_version": 1, "ncu_version": str,
                        "kernels": [NcuKernelRow], "cases": [NcuCaseMetrics]}
    sass.json          {"schema": "attnwatch.sass", "schema_version": 1,
                        "binaries": [SassBinary], "variants": [VariantBinary]}
                       (a file of its own, optional: a bundle without it, of any format, reads as
                       before, so adding it changed no other file and not the bundle's format)

Producers (ci, and the tests' factory) build these dataclasses and write them with the one
writer, history.contract.bundle_writer, which runs the reader's own checks (history.contract.validate.check_documents)
on the files it is about to write; history.contract.validate is the one reader: it loads and validates every file before anything is written to the
database (ingest) or compared (compare's rounds). Bundles are untrusted data: sizes are capped
and every field is checked.

Units are in field names: `_us` microseconds, `_mhz`, `_bytes`, `_tflops`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

# The largest file a bundle may hold (a bigger one is refused unparsed); the reader's default.
from attnwatch.history.contract.checks import MAX_FILE_BYTES  # noqa: F401  (part of the contract's names)
from attnwatch.history.contract.checks import rule, rule_metadata
from attnwatch.history.contract.names import CASE_ID, DIGEST, LABEL, NAME
from attnwatch.history.analysis.statistics import Summary

# The current version of each format; a change to one adds an upgrader (history.contract.bundle_upgrades)
# from the previous version and bumps its number here.
SCHEMA_VERSIONS = {
    "attnwatch.manifest": 4,  # the bundle format; v2: timings in timings.json (history.contract.timings);
    # v3: environment.packages, the optional packages' versions; v4: fingerprints (each variant's),
    # environment.cudnn_version, cublas_version, power_limit_w, harness_digest
    "attnwatch.timings": 1,
    "attnwatch.outcomes": 2,  # v2: each case's operator
    "attnwatch.correctness": 2,  # v2: the check's profile, calls, violations, worst index, tolerance used
    "attnwatch.builds": 2,  # v2: every field required
    "attnwatch.samples": 2,  # v2: sm_clock_mhz, each sample's SM clock (ci/timing/power.py)
    "attnwatch.ncu": 1,
    "attnwatch.sass": 1,
    "attnwatch.case_timing": 5,  # each timings.json record; v2: kernel_config, kernel_config_source;
    # v3: operator, bound, bytes, gap_to_baseline + baseline_variant, gap_to_fastest_reference + fastest_reference;
    # v4: timing_recipe, clocks, pacing, band; v5: kernel_binary_sha256
}

MANIFEST_FILE = "manifest.json"
TIMINGS_FILE = "timings.json"
BENCHMARK_FILE = "benchmark.json"
OUTCOMES_FILE = "outcomes.json"
CORRECTNESS_FILE = "correctness.json"
BUILDS_FILE = "builds.json"
SAMPLES_FILE = "samples.json"
NCU_FILE = "ncu.json"
NCU_RAW_FILE = "ncu_raw.csv"
SASS_FILE = "sass.json"

# A manifest's commit_sha when the run was measured outside a git checkout: compare accepts
# it, ingest does not (a run must be placed on a commit).
UNKNOWN_COMMIT = "unknown"
CASE_STATUSES = ("ok", "failed", "crashed", "timeout", "skipped", "unsupported")
RUN_STATUSES = ("complete", "partial", "failed")
KERNEL_CONFIG_SOURCES = ("table", "tuned", "cached", "fixed")  # CaseTiming.kernel_config_source
OPERATOR_BOUNDS = ("compute", "memory")  # CaseTiming.bound (kernels.operators.BOUNDS)
TRIGGERS = ("push", "pull_request", "schedule", "workflow_dispatch", "local", "import", "compare")


@dataclass
class Environment:
    """Where a run was measured. `device_kind` is "cuda" or "cpu"; GPU fields are None on a CPU."""

    device_kind: str
    hostname: str
    os: str
    python_version: str
    cpu: str = ""
    gpu_name: str | None = rule(None, name=LABEL)  # the GPU model: part of every series key
    gpu_uuid: str | None = None
    gpu_count: int = 0
    compute_capability: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    cupy_version: str | None = None
    nvcc_version: str | None = None
    # Which GPU and which pool (bundles before these fields: None; history.contract.series_key).
    # gpu_uuid above and these name the GPU the run used, as NVML does: `gpu_index` is NVML's
    # index (not CUDA's ordinal under CUDA_VISIBLE_DEVICES), `gpu_mig_uuid` the MIG slice if any;
    # `pool` is what the runner declared in ATTNWATCH_POOL (None: its host is its pool).
    gpu_pci_bus_id: str | None = None
    gpu_index: int | None = None
    gpu_mig_uuid: str | None = None
    pool: str | None = None
    # Format 3: distribution -> installed version of each optional package the variants import
    # (kernels/optional_packages.py RECORDED_DISTRIBUTIONS), None for one not installed; {}: a
    # bundle of an older format, which did not record them.
    packages: dict[str, str | None] = rule(default_factory=dict, max_items=64)
    # Format 4 (None: not recorded, an older bundle). The cuDNN and cuBLAS libraries' versions (their
    # wheels' metadata), the GPU's enforced power limit (NVML, watts), and the sha256 of the shared
    # measuring code (ci/fingerprint/rules.toml [harness]: the engine, timing, inputs, checks): what
    # an alert's attribution compares as the environment and the machine (history/analysis/attribution.py).
    cudnn_version: str | None = rule(None, max_len=64)
    cublas_version: str | None = rule(None, max_len=64)
    power_limit_w: float | None = None
    harness_digest: str | None = rule(None, max_len=64)


@dataclass
class VariantFingerprint:
    """What one variant's timed work was, as the compare selects by (ci/fingerprint/variant.py):
    `digest` covers its code, data files, build records, binaries, libraries and settings; `code`
    only what the variant's own code decides (its files, binaries and build records without the
    chosen launch configuration), so a library upgrade or a configuration pick does not read as
    a code change. None with `unknown` saying why: the fingerprint could not be taken."""

    digest: str | None = rule(None, max_len=64)
    code: str | None = rule(None, max_len=64)
    unknown: str | None = rule(None, max_len=1000)


@dataclass
class Manifest:
    run_id: str
    repo: str
    commit_sha: str
    trigger: str
    started_at: str = field(
        metadata=rule_metadata(timestamp=True)
    )  # ISO 8601 with its UTC offset (checks.parse_utc); stored as UTC
    finished_at: str = field(metadata=rule_metadata(timestamp=True))
    runner: str
    shape_set: str
    status: str
    environment: Environment
    parent_sha: str | None = None
    branch: str | None = None
    pr_number: int | None = None
    commit_message: str | None = None
    commit_date: str | None = rule(None, timestamp=True)
    dirty: bool = False
    synthetic: bool = False  # generated data (scale tests), never a measurement
    notes: str = ""
    files: dict[str, str] = field(default_factory=dict)  # role -> file name inside the bundle
    # Format 4: variant -> its fingerprint in this run ({}: not recorded, an older bundle).
    fingerprints: dict[str, VariantFingerprint] = rule(default_factory=dict, max_items=512)
    schema: str = "attnwatch.manifest"
    schema_version: int = SCHEMA_VERSIONS["attnwatch.manifest"]


@dataclass(kw_only=True)
class CaseTiming(Summary):
    """GPU statistics of one case, stored in timings.json (history.contract.timings): the
    Summary of its samples (history.analysis.statistics: n, median_us ... max_us, rel_spread) and what
    was measured, how, and the figures derived from it.

    Latencies are per-call CUDA-event times in microseconds with L2 flushed before each call;
    on a CPU run they are host wall-clock times and `timing_mode` says "cpu_wall".
    """

    case_id: str = field(metadata=rule_metadata(name=CASE_ID))
    variant: str = field(metadata=rule_metadata(name=NAME))
    shape_id: str = field(metadata=rule_metadata(name=NAME))
    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    dtype: str = field(metadata=rule_metadata(name=NAME))
    causal: bool
    timing_mode: str  # "cuda_events" | "cuda_graph" | "cpu_wall"
    us_per_head: float
    tflops: float
    converged: bool  # relative spread under target before the time cap
    graph_median_us: float | None = None  # CUDA-graph replay time, launch-bound cases
    # The operator (kernels.operators), what its roofline plots against ("compute": TFLOP/s under
    # the GEMM peak; "memory": bytes / median under the DRAM bandwidth), and its byte model's
    # figure: the fewest DRAM bytes one call moves (attention: Q, K, V and O once). None: a
    # bundle from before v3 did not record it.
    operator: str = rule("attention", name=NAME)
    bound: str | None = rule(None, choices=OPERATOR_BOUNDS)
    bytes: float | None = None
    # median / median(baseline_variant): the operator's baseline, same interleave group.
    gap_to_baseline: float | None = None
    baseline_variant: str | None = rule(None, name=NAME)
    gap_to_backends: dict[str, float] = field(default_factory=dict)  # each measured reference -> ratio
    # The gap to the fastest of the operator's references measured in the group, and which it was.
    gap_to_fastest_reference: float | None = None
    fastest_reference: str | None = rule(None, name=NAME)
    sm_clock_mhz_before: int | None = None
    sm_clock_mhz_after: int | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    throttled_samples: int = 0
    interleave_group: str | None = None  # cases timed round-robin together share this
    schema_version: int = SCHEMA_VERSIONS["attnwatch.case_timing"]
    # CUDA-event timing enqueues each block behind a guard kernel so host dispatch never lands
    # inside a sample. Blocks re-timed because the host outlasted the guard, and blocks kept
    # still uncovered after the last attempt (samples possibly containing host gaps).
    # None: no guard ran (cpu_wall timing, or a bundle written before these fields).
    guard_retimed_blocks: int | None = None
    guard_uncovered_blocks: int | None = None
    # The launch configuration the kernel ran with, as its variant reported it
    # (kernels.variant.Prepared.config, e.g. triton_fa2's "m64_n128_w4_s3"), and how it was
    # chosen: "table" (recorded per GPU model and problem), "tuned" (timed in the measuring
    # process), "cached" (tuned once by an earlier process, read from the shared choice cache,
    # kernels/triton/choice_cache.py), "fixed" (nothing to choose). None: the variant reports none, or a v1 bundle.
    kernel_config: str | None = rule(None, name=NAME)
    kernel_config_source: str | None = rule(None, choices=KERNEL_CONFIG_SOURCES)
    # The sha256 of the binary the kernel ran, for a variant that compiles it in the measuring
    # process (kernels.variant.Prepared.binary_sha256: triton_fa2's cubin, one per configuration
    # and shape specialization). Exact: two sides that ran one binary ran the same code, and a
    # compare reads the two binaries a changed digest names (ci/compare/runtime_binaries.py).
    # None: the variant builds ahead of the run (nvcc: builds.json), reports none, or a v4 bundle.
    kernel_binary_sha256: str | None = rule(None, name=DIGEST)
    # How the samples were taken on a GPU that may run under its power or thermal cap
    # (ci/timing/power.py): the recipe's name (ci/run_config.toml: "plain" = no clock record, no
    # pacing, no band), the per-sample SM clocks' median, min and max, the reference clock and
    # the clock-normalised median (median of t_i * f_i / f_ref: a cycle-space figure, NOT a
    # latency, stored beside median_us and never in its place), the pacing gap's total wall time
    # (None: no pacing), and the samples the clock band discarded (None: no band; the statistics
    # above are those of the samples kept). All None: a run without these (v2 bundle, CPU).
    timing_recipe: str | None = rule(None, name=NAME)
    sm_clock_median_mhz: float | None = None
    sm_clock_min_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    reference_clock_mhz: float | None = None
    clock_normalised_median_us: float | None = None
    pacing_gap_s: float | None = None
    band_discarded_samples: int | None = None


@dataclass
class CaseOutcome:
    case_id: str = field(metadata=rule_metadata(name=CASE_ID))
    variant: str = field(metadata=rule_metadata(name=NAME))
    shape_id: str = field(metadata=rule_metadata(name=NAME))
    dtype: str = field(metadata=rule_metadata(name=NAME))
    causal: bool
    status: str  # one of CASE_STATUSES
    error: str | None = None
    duration_s: float | None = None
    operator: str = rule("attention", name=NAME)  # kernels.operators: what the case computes


@dataclass(frozen=True)
class CaseKey:
    """The case a record is about: a variant on one problem (kernels.cases.Case, as plain data).

    ci's plan (ci.plan.PlannedCase) is this too: what a child is asked to run is what its
    records are about.
    """

    variant: str = field(metadata=rule_metadata(name=NAME))
    shape_id: str = field(metadata=rule_metadata(name=NAME))
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str = field(metadata=rule_metadata(name=NAME))
    causal: bool


@dataclass(frozen=True, kw_only=True)
class CorrectnessRecord(CaseKey):
    """One seed of one case's correctness check against the float64 reference.

    Written by ci from kernels.correctness's CheckResult (ci.records), field by field. Every
    field is required: None says a value does not exist (no output was compared: the check
    failed first) or, for a record upgraded from schema v1, was not recorded then.
    Pass rule: finite output and |out - ref| <= atol + rtol * |ref| everywhere.
    """

    case_id: str = field(metadata=rule_metadata(name=CASE_ID))
    seed: int
    profile: str | None  # kernels.inputs input profile ("normal", "large_logits")
    calls: int | None  # launches checked (each compared with the reference)
    passed: bool
    error: str | None
    atol: float
    rtol: float
    # The error's magnitude (over the finite elements) and how much of the allowance it used.
    max_abs_err: float | None
    rel_err: float | None  # ||out - ref||_2 / ||ref||_2
    tolerance_used: float | None  # max |out - ref| / (atol + rtol*|ref|): < 1 passes
    violations: int | None  # elements outside the allowance, non-finite ones included
    nonfinite: int | None  # NaN/Inf (or never written) output elements
    # Of the worst violation, in the output's rank: attention's (b, h, s, d), RMSNorm's (row, column).
    worst_index: tuple[int, ...] | None


@dataclass(kw_only=True)
class BuildRecord:
    """What the compiler said about one variant's build (kernels' BuildReport, converted by
    ci.records). Every field is required (format 2): a record says what it does not know."""

    variant: str = field(metadata=rule_metadata(name=NAME))
    ok: bool
    error: str | None  # why the build failed
    target: str  # e.g. "sm_90", "sm_90a", "triton"; "" when unknown
    cached: bool  # the binary came from the build cache
    source_hash: str | None
    compile_seconds: float | None  # of the original compile, also for a cache hit
    # ptxas -v (or the compiled kernel's attributes): per thread and per block.
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    stack_frame_bytes: int | None
    spill_store_bytes: int | None
    spill_load_bytes: int | None
    config: dict[str, Any]  # the variant's build choices, e.g. the Triton autotune pick
    log_tail: str  # the end of the compiler's output


@dataclass
class NcuKernelRow:
    """One profiled kernel launch inside a case's NVTX range; metric names are ncu's own."""

    case_id: str = field(metadata=rule_metadata(name=CASE_ID))
    kernel_index: int
    kernel_name: str
    metrics: dict[str, float]  # ncu metric name -> value in base units
    block_size: str = ""
    grid_size: str = ""


@dataclass
class NcuCaseMetrics:
    """Per case: durations summed over its kernels, percentages weighted by duration."""

    case_id: str = field(metadata=rule_metadata(name=CASE_ID))
    kernel_count: int
    duration_us: float | None = None
    sm_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    dram_bytes: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    tensor_pipe_pct: float | None = None
    hmma_instructions: float | None = None
    gmma_instructions: float | None = None
    l2_hit_rate_pct: float | None = None
    registers_per_thread: float | None = None
    shared_mem_per_block_bytes: float | None = None
    local_memory_bytes: float | None = None
    sm_clock_mhz: float | None = None
    achieved_tflops: float | None = None
    occupancy_limiter: str | None = None
    error: str | None = None  # why metrics are missing (ncu absent, timed out, refused)
    memory_throughput_pct: float | None = None  # gpu__compute_memory_throughput, weighted
    dram_bytes_ideal: float | None = None  # Q, K, V read once + O written once
    arithmetic_intensity: float | None = None  # case FLOPs / DRAM bytes (roofline x-axis)
    peak_tflops: float | None = None  # the measured ceiling compared against
    pct_of_peak: float | None = None  # achieved_tflops / peak_tflops * 100


def to_json_dict(obj: Any) -> Any:
    """Dataclass (or list of them) to plain JSON-ready data; plain data passes through."""
    if isinstance(obj, list):
        return [to_json_dict(o) for o in obj]
    return asdict(obj) if is_dataclass(obj) and not isinstance(obj, type) else obj


# --- File envelopes (additive helpers for the layout documented at the top) ---------------
# Every bundle file except benchmark.json is {"schema": FILE_SCHEMAS[name], "schema_version": N,
# <payload keys as in the module docstring>}; CaseTiming carries its own schema_version.
FILE_SCHEMAS = {
    MANIFEST_FILE: "attnwatch.manifest",
    TIMINGS_FILE: "attnwatch.timings",
    OUTCOMES_FILE: "attnwatch.outcomes",
    CORRECTNESS_FILE: "attnwatch.correctness",
    BUILDS_FILE: "attnwatch.builds",
    SAMPLES_FILE: "attnwatch.samples",
    NCU_FILE: "attnwatch.ncu",
    SASS_FILE: "attnwatch.sass",
}
REQUIRED_FILES = (MANIFEST_FILE, TIMINGS_FILE, BENCHMARK_FILE, OUTCOMES_FILE)  # timings.json: format 2 on


@dataclass(frozen=True)
class RecordList:
    """A list of records in a bundle file: {"schema", "schema_version", <key>: [record], ...}."""

    file: str
    key: str
    record: type


# Every record list of a bundle, under the name the writer's contents and the reader's
# LoadedBundle give it: the one place a list's file, key and record type are said.
RECORD_LISTS = {
    "outcomes": RecordList(OUTCOMES_FILE, "cases", CaseOutcome),
    "correctness": RecordList(CORRECTNESS_FILE, "records", CorrectnessRecord),
    "builds": RecordList(BUILDS_FILE, "builds", BuildRecord),
    "ncu_kernels": RecordList(NCU_FILE, "kernels", NcuKernelRow),
    "ncu_cases": RecordList(NCU_FILE, "cases", NcuCaseMetrics),
}
# The key under a pytest-benchmark entry's extra_info naming the case it timed (format 2), and
# the one that held the case's CaseTiming in format 1 (and in a plain pytest-benchmark file
# from an attnwatch harness of that time).
CASE_LINK_KEY = "attnwatch_case"
EXTRA_INFO_KEY = "attnwatch"


def file_envelope(file_name: str, **payload: Any) -> dict[str, Any]:
    """The JSON object to write as `file_name` (see FILE_SCHEMAS), dataclasses converted."""
    body = {k: to_json_dict(v) if isinstance(v, list) else v for k, v in payload.items()}
    schema = FILE_SCHEMAS[file_name]
    return {"schema": schema, "schema_version": SCHEMA_VERSIONS[schema], **body}
