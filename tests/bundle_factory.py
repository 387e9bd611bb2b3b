"""Real run bundles for tests, built from the history.contract.bundle dataclasses.

`make_bundle(directory, ...)` writes a complete bundle directory (manifest, timings, a
pytest-benchmark format benchmark.json whose entries name their case in
`extra_info["attnwatch_case"]`, outcomes, correctness, builds, samples, optionally ncu) through
history.contract.bundle_writer, the one writer production (ci.bundle_assembly) uses too;
`bundle_contents(...)` is what it hands the writer. `as_format_1(bundle)` rewrites a bundle as
bundle format 1 stored it (the timings inside benchmark.json). Latencies are drawn from a seeded log-normal around a per-variant
speed (or taken from recorded samples), and the stored statistics are computed from the
stored samples, so every file agrees with the others.

`make_pytest_benchmark_file(path, ...)` writes a plain pytest-benchmark JSON file.

Shared by every area's tests: keep options general and defaults realistic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from attnwatch.history.contract.bundle import (
    BuildRecord,
    CaseOutcome,
    CaseTiming,
    CorrectnessRecord,
    Environment,
    Manifest,
    NcuCaseMetrics,
    NcuKernelRow,
    VariantFingerprint,
)
from attnwatch.history.contract.bundle_writer import BundleContents, NcuFiles, write_bundle
from attnwatch.history.contract.sass_file import SassRecords
from attnwatch.history.analysis.statistics import summarize


@dataclass(frozen=True)
class FactoryShape:
    id: str
    batch: int
    heads: int
    seq: int
    head_dim: int

    def flops(self, causal: bool) -> float:
        full = 4.0 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return full / 2 if causal else full


SHAPES = (
    FactoryShape("l4_mission", 1, 8, 512, 64),
    FactoryShape("h100_small", 1, 16, 1024, 64),
    FactoryShape("b4_h16_s1k", 4, 16, 1024, 64),
    FactoryShape("b4_h16_s1k_d128", 4, 16, 1024, 128),
    FactoryShape("b4_h16_s2k", 4, 16, 2048, 64),
    FactoryShape("b16_h16_s2k", 16, 16, 2048, 64),
)
VARIANTS = ("sdpa", "sdpa_flash", "sdpa_efficient", "torch_3op", "cuda_wmma", "triton_fa2")
# Effective TFLOPS per variant on the pretend GPU: sets the latency scale of each.
VARIANT_TFLOPS = {
    "sdpa": 300.0,
    "sdpa_flash": 280.0,
    "sdpa_efficient": 180.0,
    "sdpa_cudnn": 320.0,
    "sdpa_math": 40.0,
    "torch_3op": 60.0,
    "cuda_scalar": 4.0,
    "cuda_wmma": 90.0,
    "cuda_wmma_cpasync": 110.0,
    "triton_fa2": 250.0,
}
BACKENDS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")


def case_id(variant: str, shape_id: str, dtype: str, causal: bool) -> str:
    return f"{variant}/{shape_id}/{dtype}/{'causal' if causal else 'noncausal'}"


def make_bundle(directory: str | Path, **options) -> Path:
    """Write one bundle (`bundle_contents`' options) and return its directory."""
    return write_bundle(directory, bundle_contents(**options))


def bundle_contents(
    *,
    run_id: str | None = None,
    n_cases: int | None = None,
    variants: tuple[str, ...] = VARIANTS,
    shapes: tuple[FactoryShape, ...] = SHAPES[:2],
    dtypes: tuple[str, ...] = ("fp16",),
    causal: tuple[bool, ...] = (False, True),
    commit_sha: str | None = None,
    parent_sha: str | None = None,
    commit_message: str = "Tune tiles",
    commit_date: datetime | None = None,
    branch: str | None = "main",
    pr_number: int | None = None,
    trigger: str = "push",
    repo: str = "example/attention-kernels",
    gpu_name: str = "NVIDIA H200",
    started_at: datetime | None = None,
    run_status: str = "complete",
    statuses: dict[str, str] | None = None,
    latency_scale: float = 1.0,
    variant_scale: dict[str, float] | None = None,
    n_samples: int = 50,
    recorded: dict[str, list[float]] | None = None,
    with_samples: bool = True,
    with_correctness: bool = True,
    with_builds: bool = True,
    with_ncu: bool = False,
    ncu_metrics: dict[str, dict[str, float]] | None = None,
    ncu_launches: dict[str, list[tuple[str, dict[str, float]]]] | None = None,
    sass: SassRecords | None = None,
    synthetic: bool = False,
    seed: int = 0,
    hostname: str = "gpu-runner-1",
    environment: dict | None = None,
    timing_overrides: dict[str, dict] | None = None,
    incorrect: tuple[str, ...] = (),
    kernel_configs: dict[str, str] | None = None,
    fingerprints: dict[str, dict] | None = None,
) -> BundleContents:
    """The contents of one bundle, as a producer hands them to the writer.

    `statuses` maps case ids (or variant names) to a non-ok status; `n_cases` cuts the case
    list (variants x shapes x dtypes x causal, in that order); `variant_scale` multiplies one
    variant's latency (plant a regression); `recorded` maps case ids to per-call samples (µs) to
    store instead of drawn ones (real noise); commit_sha defaults to a hash of the run id;
    `hostname` names the host (runner) and `environment` overrides any other Environment field;
    `timing_overrides` maps case ids to CaseTiming fields to set (e.g. converged=False,
    graph_median_us=..., throttled_samples=...), as the harness would have stored them;
    `incorrect` names cases whose correctness check fails although they timed fine (status ok).
    `kernel_configs` maps variants to the launch configuration their results record (default:
    triton_fa2 ran the recorded "m64_n64_w4_s3", as on a GPU with a choices.toml entry).
    `fingerprints` maps variants to their format-4 fingerprint ({"digest", "code", "unknown"});
    default none recorded.
    """
    kernel_configs = {"triton_fa2": "m64_n64_w4_s3"} if kernel_configs is None else kernel_configs
    rng = np.random.default_rng(seed)
    started = started_at or datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)
    run_id = run_id or f"run-{seed}-{int(started.timestamp())}"
    sha = commit_sha or hashlib.sha1(run_id.encode()).hexdigest()
    cases = [(v, s, d, c) for v in variants for s in shapes for d in dtypes for c in causal]
    if n_cases is not None:
        while len(cases) < n_cases:  # more cases than the grid: repeat it with extra dtypes
            cases += [(v, s, f"{d}x{len(cases)}", c) for v, s, d, c in cases[: n_cases - len(cases)]]
        cases = cases[:n_cases]

    timings, outcomes, samples, entries = [], [], {}, []
    medians: dict[tuple, float] = {}
    for variant, shape, dtype, is_causal in cases:
        cid = case_id(variant, shape.id, dtype, is_causal)
        status = (statuses or {}).get(cid) or (statuses or {}).get(variant) or "ok"
        error = None if status in ("ok", "skipped") else f"{status}: planted by the test factory"
        if status == "skipped":
            error = "skipped: variant not available on this device"
        outcomes.append(CaseOutcome(cid, variant, shape.id, dtype, is_causal, status, error, duration_s=0.5))
        if status not in ("ok", "failed"):
            continue
        scale = latency_scale * (variant_scale or {}).get(variant, 1.0)
        base_us = shape.flops(is_causal) / (VARIANT_TFLOPS.get(variant, 100.0) * 1e12) * 1e6 * scale
        if recorded is not None and cid in recorded:
            values = [float(v) * scale for v in recorded[cid]]
        else:
            values = (base_us * rng.lognormal(0.0, 0.01, n_samples)).tolist()
        medians[(shape.id, dtype, is_causal, variant)] = float(np.median(values))
        samples[cid] = values
        timings.append((cid, variant, shape, dtype, is_causal, values))

    case_timings = []
    for cid, variant, shape, dtype, is_causal, values in timings:
        s = summarize(values)
        sdpa = medians.get((shape.id, dtype, is_causal, "sdpa"))
        backends = {
            b: s.median_us / medians[(shape.id, dtype, is_causal, b)]
            for b in BACKENDS
            if (shape.id, dtype, is_causal, b) in medians
        }
        fastest = min(backends, key=backends.get) if backends else None
        timing = CaseTiming(
            case_id=cid,
            variant=variant,
            shape_id=shape.id,
            batch=shape.batch,
            heads=shape.heads,
            seq_q=shape.seq,
            seq_k=shape.seq,
            head_dim=shape.head_dim,
            dtype=dtype,
            causal=is_causal,
            timing_mode="cuda_events",
            **asdict(s),
            us_per_head=s.median_us / (shape.batch * shape.heads),
            tflops=shape.flops(is_causal) / (s.median_us * 1e-6) / 1e12,
            converged=True,
            bound="compute",
            bytes=4.0 * shape.batch * shape.heads * shape.seq * shape.head_dim * 2,
            gap_to_baseline=s.median_us / sdpa if sdpa else None,
            baseline_variant="sdpa" if sdpa else None,
            gap_to_backends=backends,
            gap_to_fastest_reference=backends[fastest] if fastest else None,
            fastest_reference=fastest,
            sm_clock_mhz_before=1980,
            sm_clock_mhz_after=1980,
            kernel_config=kernel_configs.get(variant),
            kernel_config_source="table" if variant in kernel_configs else None,
        )
        if timing_overrides and cid in timing_overrides:
            timing = replace(timing, **timing_overrides[cid])
        case_timings.append(timing)
        entries.append(_benchmark_entry(timing, values))

    env_fields = dict(
        device_kind="cuda",
        hostname=hostname,
        os="Linux 6.8",
        python_version="3.12.3",
        cpu="x86_64",
        gpu_name=gpu_name,
        gpu_uuid=f"GPU-{hashlib.md5(gpu_name.encode()).hexdigest()[:8]}",
        gpu_count=1,
        compute_capability="9.0",
        sm_count=132,
        l2_bytes=50 * 2**20,
        driver_version="580.65",
        cuda_version="13.0",
        sm_clock_mhz=1980,
        sm_clock_max_mhz=1980,
        torch_version="2.11.0",
        triton_version="3.6.0",
        cupy_version="14.2.0",
        nvcc_version="13.0",
    )
    manifest = Manifest(
        run_id=run_id,
        repo=repo,
        commit_sha=sha,
        trigger=trigger,
        started_at=started.isoformat(),
        finished_at=(started + timedelta(minutes=5)).isoformat(),
        runner=hostname,
        shape_set="pr",
        status=run_status,
        environment=Environment(**{**env_fields, **(environment or {})}),
        parent_sha=parent_sha,
        branch=branch,
        pr_number=pr_number,
        commit_message=commit_message,
        commit_date=(commit_date or started - timedelta(minutes=10)).isoformat(),
        synthetic=synthetic,
        notes="synthetic: made by tests/bundle_factory.py" if synthetic else "",
        fingerprints={v: VariantFingerprint(**f) for v, f in (fingerprints or {}).items()},
    )
    document = benchmark_document(entries, started, sha, branch)
    timed_ids = [t[0] for t in timings]
    correctness = (
        [
            _correctness(
                cid,
                v,
                sh,
                d,
                c,
                k,
                passed=(statuses or {}).get(cid, (statuses or {}).get(v)) != "failed" and cid not in incorrect,
            )
            for cid, v, sh, d, c, _ in timings
            for k in (0, 1)
        ]
        if with_correctness
        else None
    )
    builds = (
        [
            BuildRecord(
                variant=v,
                ok=True,
                error=None,
                target="sm_90",
                cached=False,
                source_hash="5eed" * 16,
                compile_seconds=3.2,
                registers_per_thread=128,
                shared_mem_bytes=49152,
                stack_frame_bytes=0,
                spill_store_bytes=0,
                spill_load_bytes=0,
                config={"block_m": 64, "block_n": 64, "stages": 2},
                log_tail="ptxas info    : Used 128 registers",
            )
            for v in sorted({t[1] for t in timings})
            if v.startswith(("cuda", "triton"))
        ]
        if with_builds
        else None
    )
    ncu_kernels = ncu_cases = None
    if with_ncu:
        # ncu_metrics: a case's kernel counters instead of the two stand-in ones (one kernel)
        # ncu_launches: a case's kernels, (name, counters) in launch order, as a real profile had them
        launches = {
            cid: (ncu_launches or {}).get(cid)
            or [
                (
                    f"{cid.split('/')[0]}_kernel",
                    (ncu_metrics or {}).get(cid)
                    or {
                        "gpu__time_duration.sum": 1000.0 * (i + 1),
                        "sm__throughput.avg.pct_of_peak_sustained_elapsed": 61.5,
                    },
                )
            ]
            for i, cid in enumerate(timed_ids)
        }
        ncu_kernels = [
            NcuKernelRow(cid, index, name, metrics, block_size="(128, 1, 1)", grid_size="(64, 16, 1)")
            for cid in timed_ids
            for index, (name, metrics) in enumerate(launches[cid])
        ]
        ncu_cases = [
            NcuCaseMetrics(cid, kernel_count=len(launches[cid]), duration_us=1.0 * (i + 1), sm_throughput_pct=61.5)
            for i, cid in enumerate(timed_ids)
        ]
    ncu = NcuFiles(None, ncu_kernels, ncu_cases, sass=sass) if with_ncu else None
    return BundleContents(
        manifest,
        document,
        outcomes,
        timings=case_timings,
        correctness=correctness,
        builds=builds,
        samples=samples if with_samples else None,
        ncu=ncu,
    )


def _correctness(
    cid: str, variant: str, shape: FactoryShape, dtype: str, causal: bool, seed: int, passed: bool
) -> CorrectnessRecord:
    """A plausible check record: a pass well inside the fp16 allowance, or a failure with its error."""
    return CorrectnessRecord(
        case_id=cid,
        variant=variant,
        shape_id=shape.id,
        batch=shape.batch,
        heads=shape.heads,
        seq_len=shape.seq,
        head_dim=shape.head_dim,
        dtype=dtype,
        causal=causal,
        seed=seed,
        profile="normal",
        calls=2,
        passed=passed,
        error=None
        if passed
        else "call 1: 12 elements outside atol=0.02 + rtol=0.02*|ref|, worst at (b, h, s, d) = (0, 1, 7, 3)",
        atol=2e-2,
        rtol=2e-2,
        max_abs_err=1e-3 if passed else 0.25,
        rel_err=2e-4 if passed else 0.05,
        tolerance_used=0.04 if passed else 8.3,
        violations=0 if passed else 12,
        nonfinite=0,
        worst_index=None if passed else (0, 1, 7, 3),
    )


def _benchmark_entry(timing: CaseTiming, values_us: list[float]) -> dict:
    """A pytest-benchmark 4.x/5.x entry for one case, host stats mirroring the GPU samples."""
    s = np.asarray(values_us) * 1e-6
    q1, q3 = np.percentile(s, [25, 75])
    return {
        "group": f"{timing.shape_id}/{timing.dtype}",
        "name": f"test_attention[{timing.case_id}]",
        "fullname": f"tests/bench/test_attention.py::test_attention[{timing.case_id}]",
        "params": {"case": timing.case_id},
        "param": timing.case_id,
        "extra_info": {"attnwatch_case": timing.case_id},
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 5e-06,
            "warmup": False,
        },
        "stats": {
            "min": float(s.min()),
            "max": float(s.max()),
            "mean": float(s.mean()),
            "stddev": float(s.std(ddof=1)) if len(s) > 1 else 0.0,
            "rounds": len(s),
            "median": float(np.median(s)),
            "iqr": float(q3 - q1),
            "q1": float(q1),
            "q3": float(q3),
            "iqr_outliers": 0,
            "stddev_outliers": 0,
            "outliers": "0;0",
            "ld15iqr": float(s.min()),
            "hd15iqr": float(s.max()),
            "ops": float(1 / s.mean()),
            "total": float(s.sum()),
            "iterations": 1,
        },
    }


def benchmark_document(entries: list[dict], when: datetime, sha: str, branch: str | None) -> dict:
    return {
        "machine_info": {
            "node": "gpu-runner-1",
            "processor": "x86_64",
            "machine": "x86_64",
            "python_implementation": "CPython",
            "python_version": "3.12.3",
            "release": "6.8.0",
            "system": "Linux",
        },
        "commit_info": {
            "id": sha,
            "time": (when - timedelta(minutes=10)).isoformat(),
            "dirty": False,
            "project": "attention-kernels",
            "branch": branch or "(detached head)",
        },
        "benchmarks": entries,
        "datetime": when.isoformat(),
        "version": "5.2.3",
    }


def make_pytest_benchmark_file(
    path: str | Path,
    *,
    names: tuple[str, ...] = ("test_fast", "test_slow"),
    median_s: float = 1e-4,
    group: str | None = None,
    sha: str = "ab" * 20,
    when: datetime | None = None,
) -> Path:
    """A plain pytest-benchmark JSON file (no attnwatch extra_info), as pytest-benchmark writes it."""
    when = when or datetime(2026, 10, 1, 9, 0, tzinfo=timezone.utc)
    entries = []
    for i, name in enumerate(names):
        m = median_s * (i + 1)
        entries.append(
            {
                "group": group,
                "name": name,
                "fullname": f"tests/test_speed.py::{name}",
                "params": None,
                "param": None,
                "extra_info": {},
                "options": {"timer": "perf_counter"},
                "stats": {
                    "min": m * 0.9,
                    "max": m * 1.3,
                    "mean": m * 1.02,
                    "stddev": m * 0.05,
                    "rounds": 100,
                    "median": m,
                    "iqr": m * 0.04,
                    "q1": m * 0.98,
                    "q3": m * 1.02,
                    "iqr_outliers": 1,
                    "stddev_outliers": 2,
                    "outliers": "2;1",
                    "ld15iqr": m * 0.9,
                    "hd15iqr": m * 1.1,
                    "ops": 1 / m,
                    "total": m * 100,
                    "iterations": 1,
                },
            }
        )
    path = Path(path)
    path.write_text(json.dumps(benchmark_document(entries, when, sha, "main")), encoding="utf-8")
    return path


def as_format_1(bundle: str | Path) -> Path:
    """Rewrite a bundle in place as bundle format 1 stored it: each CaseTiming inside its
    benchmark entry's `extra_info["attnwatch"]` (entries of cases without a host timing added as
    compare wrote them, with empty stats), no timings.json, a version-1 manifest."""
    bundle = Path(bundle)
    timings = {t["case_id"]: t for t in json.loads((bundle / "timings.json").read_text())["timings"]}
    benchmark = json.loads((bundle / "benchmark.json").read_text())
    entries = []
    for entry in benchmark["benchmarks"]:
        extra = dict(entry["extra_info"])
        entries.append({**entry, "extra_info": {**extra, "attnwatch": timings.pop(extra.pop("attnwatch_case"))}})
    entries += [
        {
            "name": f"compare[{cid}]",
            "fullname": f"attnwatch compare::{cid}",
            "group": None,
            "params": {"case": cid},
            "stats": {},
            "extra_info": {"attnwatch": t},
        }
        for cid, t in timings.items()
    ]
    (bundle / "benchmark.json").write_text(json.dumps({**benchmark, "benchmarks": entries}))
    (bundle / "timings.json").unlink()
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"].pop("timings")
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 1}))
    return bundle
