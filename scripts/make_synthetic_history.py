"""Write a realistic synthetic history for scale tests and demos: `--rows N --db PATH`.

Every run is marked `synthetic = true` and its notes say "synthetic", so nothing here can be
mistaken for a measurement. What it models:
  - commits on main, one every few hours, ending now; each measured on every GPU;
  - cases = variants x named shapes x dtypes x causal, latency from an effective TFLOPS per
    variant and GPU, with a gentle random-walk drift per series and ~0.3% per-run noise;
  - planted steps: triton_fa2 8% slower from 60% of the way on the first GPU, cuda_wmma
    12% faster from 80% on every GPU (detection should find both);
  - the last push (newest commit): triton_fa2 10% slower on the first two GPUs (PUSH_STEP), and
    one correctness failure (PUSH_INCORRECT_CASE on the first GPU);
  - what the timing harness stores about a number's quality: small cases noisier (some not
    converged), a few throttled samples, and a CUDA-graph replay time below the event time for
    launch-bound cases (median under 50 µs);
  - some failures (crashed / timeout), unsupported cases (no sdpa_cudnn on a GPU), and ncu
    rows for every 10th commit;
  - raw samples and correctness checks only for the newest two runs of each GPU (what the
    dashboard's first page compares); every older run reads "correctness not run".
Rows are generated column-wise with numpy and bulk-inserted as Arrow tables (history.store.arrow_insert),
in chunks of runs, one transaction per chunk.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa

from attnwatch.history.store.db import open_write
from attnwatch.history.store.location import parse_location
from attnwatch.history.store.arrow_insert import insert_arrow

VARIANTS = {  # name -> effective TFLOPS on an H200-class GPU (fp16, non-causal, large shapes)
    "sdpa": 330.0,
    "sdpa_flash": 300.0,
    "sdpa_efficient": 190.0,
    "sdpa_cudnn": 360.0,
    "sdpa_math": 35.0,
    "torch_3op": 70.0,
    "cuda_scalar": 3.5,
    "cuda_wmma": 95.0,
    "cuda_wmma_cpasync": 120.0,
    "triton_fa2": 270.0,
}
SHAPES = [  # id, B, H, S, D
    ("l4_mission", 1, 8, 512, 64),
    ("h100_small", 1, 16, 1024, 64),
    ("b4_h16_s1k", 4, 16, 1024, 64),
    ("b4_h16_s1k_d128", 4, 16, 1024, 128),
    ("b4_h16_s2k", 4, 16, 2048, 64),
    ("b16_h16_s2k", 16, 16, 2048, 64),
]
GPUS = {  # relative speed; the first three are the default, --gpus 5 adds the others
    "NVIDIA H200": 1.0,
    "NVIDIA H100 80GB HBM3": 0.78,
    "NVIDIA L4": 0.12,
    "NVIDIA A100-SXM4-80GB": 0.50,
    "NVIDIA L40S": 0.30,
}
DEFAULT_GPUS = 3
DTYPES = ("fp16", "bf16")
BACKENDS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")
CHUNK_RUNS = 200
PUSH_STEP = ("triton_fa2", 1.10, 2)  # variant, factor, on the first N GPUs, in the newest commit
PUSH_INCORRECT_CASE = "cuda_wmma/b4_h16_s1k/fp16/noncausal"  # fails correctness in the newest run of GPU 0
GRAPH_THRESHOLD_US = 50.0  # as ci/run_config.toml: launch-bound cases are also timed as graph replays
DISPATCH_GAP_US = 8.0  # host dispatch per call that event timing of a launch-bound case includes
PUSH_SAMPLES = 200  # raw samples per case in the newest two runs of each GPU
CORRECTNESS_SEEDS = 3


def case_grid():
    rows = []
    for v in VARIANTS:
        for sid, b, h, s, d in SHAPES:
            for dt in DTYPES:
                for causal in (False, True):
                    rows.append((v, sid, b, h, s, d, dt, causal))
    return rows


def generate(
    db_path: str, target_rows: int, seed: int = 7, hours_between_commits: float = 6.0, n_gpus: int = DEFAULT_GPUS
) -> dict:
    """Write the history into `db_path` (a file or a lake location, history.store.location)."""
    rng = np.random.default_rng(seed)
    cases = case_grid()
    n_cases, gpus = len(cases), list(GPUS)[:n_gpus]
    n_commits = max(1, -(-target_rows // (n_cases * len(gpus))))
    now = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    commit_times = [now - timedelta(hours=hours_between_commits * (n_commits - i)) for i in range(n_commits)]
    shas = [hashlib.sha1(f"synthetic-{seed}-{i}".encode()).hexdigest() for i in range(n_commits)]

    variant = np.array([c[0] for c in cases])
    shape_id = np.array([c[1] for c in cases])
    batch, heads, seq, dim = (np.array([c[i] for c in cases]) for i in (2, 3, 4, 5))
    dtype = np.array([c[6] for c in cases])
    causal = np.array([c[7] for c in cases])
    flops = 4.0 * batch * heads * seq * seq * dim * np.where(causal, 0.5, 1.0)
    tflops_eff = np.array([VARIANTS[v] for v in variant]) * np.where(dtype == "bf16", 0.97, 1.0)
    small = (batch * heads * seq) < 20000  # launch-bound: lower efficiency
    tflops_eff = tflops_eff * np.where(small, 0.35, 1.0)
    case_ids = np.array([f"{v}/{s}/{d}/{'causal' if c else 'noncausal'}" for v, s, *_, d, c in cases])
    sdpa_index = {(s, d, c): i for i, (v, s, *_, d, c) in enumerate(cases) if v == "sdpa"}
    sdpa_of = np.array([sdpa_index[(s, d, c)] for v, s, *_, d, c in cases])
    backend_of = {b: np.array([cases.index((b, *c[1:])) for c in cases]) for b in BACKENDS}

    totals = {"runs": 0, "results": 0, "commits": 0, "ncu_cases": 0, "ncu_metrics": 0}
    with open_write(parse_location(db_path)) as con:
        commit_rows = pa.table(
            {
                "sha": shas,
                "parent_sha": [None] + shas[:-1],
                "message": [f"synthetic commit {i}" for i in range(n_commits)],
                "committed_at": pa.array(commit_times, pa.timestamp("us")),
                "branch": ["main"] * n_commits,
                "repo": ["example/attention-kernels"] * n_commits,
            }
        )
        con.execute("BEGIN TRANSACTION")
        con.register("incoming_commits", commit_rows)
        con.execute(
            "INSERT INTO commits BY NAME SELECT * FROM incoming_commits i "
            "WHERE NOT EXISTS (SELECT 1 FROM commits c WHERE c.sha = i.sha)"
        )  # a lake has no key to ignore on
        con.unregister("incoming_commits")
        con.execute("COMMIT")
        totals["commits"] = n_commits

        for g, gpu in enumerate(gpus):
            drift = np.cumsum(rng.normal(0, 0.0005, size=(n_commits, n_cases)), axis=0)
            step = np.ones((n_commits, n_cases))
            if g == 0:
                step[int(0.6 * n_commits) :, variant == "triton_fa2"] *= 1.08
            step[int(0.8 * n_commits) :, variant == "cuda_wmma"] *= 0.88
            if g < PUSH_STEP[2] and n_commits > 1:
                step[n_commits - 1 :, variant == PUSH_STEP[0]] *= PUSH_STEP[1]
            base_us = flops / (tflops_eff * GPUS[gpu] * 1e12) * 1e6
            for start in range(0, n_commits, CHUNK_RUNS):
                stop = min(n_commits, start + CHUNK_RUNS)
                if totals["results"] >= target_rows:
                    break
                _write_chunk(
                    con,
                    rng,
                    seed,
                    gpu,
                    range(start, stop),
                    shas,
                    commit_times,
                    cases,
                    case_ids,
                    variant,
                    shape_id,
                    batch,
                    heads,
                    seq,
                    dim,
                    dtype,
                    causal,
                    flops,
                    base_us,
                    drift,
                    step,
                    sdpa_of,
                    backend_of,
                    totals,
                    target_rows,
                )
        _last_push_details(con, rng, gpus, totals)
    return totals


def _last_push_details(con, rng, gpus, totals) -> None:
    """Samples and correctness for the newest two runs of each GPU (one planted failure)."""
    for g, gpu in enumerate(gpus):
        runs = [
            r[0]
            for r in con.execute(
                "SELECT run_id FROM runs WHERE gpu_name = ? AND synthetic ORDER BY started_at DESC LIMIT 2", [gpu]
            ).fetchall()
        ]
        if not runs:
            continue
        ok = con.execute(
            "SELECT run_id, case_id, variant, shape_id, batch, heads, seq_q, head_dim, dtype, causal, median_us "
            "FROM results WHERE list_contains(?, run_id) AND status = 'ok' ORDER BY run_id, case_id",
            [runs],
        ).fetchall()
        if not ok:
            continue
        cols = list(zip(*ok))
        n = len(ok)
        medians = np.asarray(cols[10], dtype=float)
        samples = medians[:, None] * rng.lognormal(0, 0.003, size=(n, PUSH_SAMPLES))
        samples *= medians[:, None] / np.median(samples, axis=1)[:, None]  # the stored median stays the median
        failing = np.array([g == 0 and r == runs[0] and c == PUSH_INCORRECT_CASE for r, c in zip(cols[0], cols[1])])
        err = np.where(failing, 0.5, 1e-3)
        k = CORRECTNESS_SEEDS
        con.execute("BEGIN TRANSACTION")
        totals["samples"] = totals.get("samples", 0) + insert_arrow(
            con,
            "samples",
            pa.table(
                {
                    "run_id": np.repeat(cols[0], PUSH_SAMPLES),
                    "case_id": np.repeat(cols[1], PUSH_SAMPLES),
                    "sample_index": pa.array(np.tile(np.arange(PUSH_SAMPLES), n), pa.int32()),
                    "latency_us": samples.reshape(-1),
                }
            ),
        )
        totals["correctness"] = totals.get("correctness", 0) + insert_arrow(
            con,
            "correctness",
            pa.table(
                {
                    "run_id": np.repeat(cols[0], k),
                    "case_id": np.repeat(cols[1], k),
                    "seed": pa.array(np.tile(np.arange(k), n), pa.int64()),
                    "variant": np.repeat(cols[2], k),
                    "shape_id": np.repeat(cols[3], k),
                    "batch": pa.array(np.repeat(cols[4], k), pa.int32()),
                    "heads": pa.array(np.repeat(cols[5], k), pa.int32()),
                    "seq_len": pa.array(np.repeat(cols[6], k), pa.int32()),
                    "head_dim": pa.array(np.repeat(cols[7], k), pa.int32()),
                    "dtype": np.repeat(cols[8], k),
                    "causal": np.repeat(cols[9], k),
                    "max_abs_err": np.repeat(err, k),
                    "rel_err": np.repeat(err / 2, k),
                    "atol": np.full(n * k, 2e-2),
                    "rtol": np.full(n * k, 2e-2),
                    "passed": np.repeat(~failing, k),
                }
            ),
        )
        con.execute("COMMIT")


def _write_chunk(
    con,
    rng,
    seed,
    gpu,
    commits,
    shas,
    times,
    cases,
    case_ids,
    variant,
    shape_id,
    batch,
    heads,
    seq,
    dim,
    dtype,
    causal,
    flops,
    base_us,
    drift,
    step,
    sdpa_of,
    backend_of,
    totals,
    target_rows,
):
    n_cases = len(cases)
    idx = np.array(list(commits))
    remaining = target_rows - totals["results"]
    idx = idx[: max(1, -(-remaining // n_cases))]
    n_runs = len(idx)
    run_ids = [f"syn-{seed}-{gpu.split()[1].lower()}-{i:06d}" for i in idx]
    noise = rng.lognormal(0, 0.003, size=(n_runs, n_cases))
    median = base_us[None, :] * np.exp(drift[idx]) * step[idx] * noise
    status = np.full((n_runs, n_cases), "ok", dtype=object)
    failed = rng.random((n_runs, n_cases)) < 0.003
    status[failed] = np.where(rng.random(failed.sum()) < 0.7, "crashed", "timeout")
    if gpu == "NVIDIA L4":
        status[:, variant == "sdpa_cudnn"] = "unsupported"
    ok = status == "ok"
    sdpa_med = median[:, sdpa_of]
    launch_bound = median < GRAPH_THRESHOLD_US
    # Small cases are noisier: some never reach the 1% IQR/median target (not converged).
    spread = np.abs(rng.normal(np.where(launch_bound, 0.012, 0.006), np.where(launch_bound, 0.008, 0.002)))
    converged = ok & (spread <= 0.01)
    throttled = np.where(rng.random(median.shape) < 0.01, rng.integers(1, 20, size=median.shape), 0)
    graph = np.where(launch_bound, np.maximum(median - DISPATCH_GAP_US, 0.3 * median), np.nan)
    gaps = {b: median / median[:, backend_of[b]] for b in BACKENDS}
    if gpu == "NVIDIA L4":
        gaps.pop("sdpa_cudnn")
    gap_stack = np.stack([gaps[b] for b in gaps], axis=-1)
    fastest_i = np.argmin(np.stack([median[:, backend_of[b]] for b in gaps], axis=-1), axis=-1)
    fastest_name = np.array(list(gaps))[fastest_i]
    gap_fastest = np.take_along_axis(gap_stack, fastest_i[..., None], axis=-1)[..., 0]

    def flat(a):
        return np.asarray(a).reshape(-1)

    def when_ok(a):
        values = flat(a).astype(float)
        return pa.array(np.where(flat(ok), values, np.nan), pa.float64(), from_pandas=True)

    n = n_runs * n_cases
    tile = lambda a: np.tile(a, n_runs)  # noqa: E731 - per-case column repeated per run
    keys = list(gaps)
    gap_values = gap_stack.reshape(n, len(keys))
    results = pa.table(
        {
            "run_id": np.repeat(run_ids, n_cases),
            "case_id": tile(case_ids),
            "variant": tile(variant),
            "shape_id": tile(shape_id),
            "batch": tile(batch).astype(np.int32),
            "heads": tile(heads).astype(np.int32),
            "seq_q": tile(seq).astype(np.int32),
            "seq_k": tile(seq).astype(np.int32),
            "head_dim": tile(dim).astype(np.int32),
            "dtype": tile(dtype),
            "causal": tile(causal),
            "status": flat(status).astype(str),
            "error": pa.array(np.where(flat(ok), None, "synthetic failure"), pa.string()),
            "timing_mode": pa.array(np.where(flat(ok), "cuda_events", None), pa.string()),
            "n_samples": pa.array(np.where(flat(ok), 200, 0), pa.int32(), mask=~flat(ok)),
            "median_us": when_ok(median),
            "p10_us": when_ok(median * (1 - spread)),
            "p90_us": when_ok(median * (1 + spread)),
            "iqr_us": when_ok(median * spread),
            "mean_us": when_ok(median * (1 + spread / 4)),
            "stddev_us": when_ok(median * spread * 0.8),
            "min_us": when_ok(median * (1 - 2 * spread)),
            "max_us": when_ok(median * (1 + 5 * spread)),
            "us_per_head": when_ok(median / (batch * heads)),
            "tflops": when_ok(flops / (median * 1e-6) / 1e12),
            "operator": np.full(n, "attention"),
            "bound": np.full(n, "compute"),
            "bytes": tile(4.0 * batch * heads * seq * dim * 2).astype(float),  # Q, K, V, O once (fp16/bf16)
            "gap_to_baseline": when_ok(median / sdpa_med),
            "baseline_variant": np.full(n, "sdpa"),
            "gap_to_sdpa": when_ok(median / sdpa_med),  # migration 012 keeps the column: the baseline is sdpa
            "gap_to_fastest_reference": when_ok(gap_fastest),
            "fastest_reference": flat(np.broadcast_to(fastest_name, median.shape)).astype(str),
            "gap_to_backends__keys": pa.array([keys] * n, pa.list_(pa.string())),
            "gap_to_backends__values": pa.array(list(gap_values), pa.list_(pa.float64())),
            "converged": flat(converged),
            "rel_spread": when_ok(spread),
            "graph_median_us": when_ok(graph),
            "sm_clock_mhz_before": pa.array(np.full(n, 1980), pa.int32()),
            "sm_clock_mhz_after": pa.array(np.full(n, 1980), pa.int32()),
            "throttled_samples": pa.array(flat(throttled), pa.int32()),
        }
    )
    runs = pa.table(
        {
            "run_id": run_ids,
            "source": ["bundle"] * n_runs,
            "repo": ["example/attention-kernels"] * n_runs,
            "commit_sha": [shas[i] for i in idx],
            "parent_sha": [shas[i - 1] if i else None for i in idx],
            "branch": ["main"] * n_runs,
            "trigger": ["push"] * n_runs,
            "started_at": pa.array([times[i] + timedelta(minutes=20) for i in idx], pa.timestamp("us")),
            "finished_at": pa.array([times[i] + timedelta(minutes=50) for i in idx], pa.timestamp("us")),
            "runner": [f"synthetic-{gpu.split()[1].lower()}"] * n_runs,
            "shape_set": ["main"] * n_runs,
            "pool": [f"synthetic-{gpu.split()[1].lower()}"]
            * n_runs,  # no host recorded: the runner is the pool (history.contract.series_key)
            "status": ["complete"] * n_runs,
            "synthetic": [True] * n_runs,
            "notes": ["synthetic: generated by scripts/make_synthetic_history.py, not a measurement"] * n_runs,
            "device_kind": ["cuda"] * n_runs,
            "gpu_name": [gpu] * n_runs,
            "gpu_count": [1] * n_runs,
            "driver_version": ["580.65"] * n_runs,
            "cuda_version": ["13.0"] * n_runs,
            "torch_version": ["2.11.0"] * n_runs,
            "triton_version": ["3.6.0"] * n_runs,
            "bundle_schema_version": [1] * n_runs,
            "content_sha256": [hashlib.sha256(r.encode()).hexdigest() for r in run_ids],
            "ingested_at": pa.array([datetime.now(timezone.utc).replace(tzinfo=None)] * n_runs, pa.timestamp("us")),
        }
    )
    nightly = np.array([i % 10 == 0 for i in idx])
    ncu_mask = (nightly[:, None] & ok).reshape(-1)
    ncu_runs = np.repeat(run_ids, n_cases)[ncu_mask]
    ncu_case = tile(case_ids)[ncu_mask]
    duration = flat(median)[ncu_mask] * 0.97
    achieved_tflops = flops / (median * 1e-6) / 1e12
    sm_pct = np.clip(flat(achieved_tflops)[ncu_mask] / 9.9, 1, 95)  # 990 dense fp16 TFLOPS = 100%
    ncu_cases = pa.table(
        {
            "run_id": ncu_runs,
            "case_id": ncu_case,
            "kernel_count": pa.array(np.ones(len(ncu_runs)), pa.int32()),
            "duration_us": duration,
            "sm_throughput_pct": sm_pct,
            "dram_throughput_pct": np.clip(100 - sm_pct, 5, 90),
            "achieved_occupancy_pct": np.full(len(ncu_runs), 42.0),
            "tensor_pipe_pct": sm_pct * 0.8,
        }
    )
    ncu_metrics = pa.table(
        {
            "run_id": np.repeat(ncu_runs, 2),
            "case_id": np.repeat(ncu_case, 2),
            "kernel_index": pa.array(np.zeros(2 * len(ncu_runs)), pa.int32()),
            "kernel_name": np.repeat([f"{c.split('/')[0]}_kernel" for c in ncu_case], 2),
            "metric_name": np.tile(
                ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed"], len(ncu_runs)
            ),
            "value": np.column_stack([duration * 1000, sm_pct]).reshape(-1),
        }
    )
    con.execute("BEGIN TRANSACTION")
    totals["runs"] += insert_arrow(con, "runs", runs)
    totals["results"] += insert_arrow(con, "results", results)
    totals["ncu_cases"] += insert_arrow(con, "ncu_cases", ncu_cases)
    totals["ncu_metrics"] += insert_arrow(con, "ncu_metrics", ncu_metrics)
    con.execute("COMMIT")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, required=True, help="result rows to write (about)")
    parser.add_argument(
        "--db", required=True, help="the history: a DuckDB file or a ducklake:postgres: lake (created if missing)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--gpus",
        type=int,
        default=DEFAULT_GPUS,
        choices=range(1, len(GPUS) + 1),
        help=f"how many GPU types (default {DEFAULT_GPUS}: {', '.join(list(GPUS)[:DEFAULT_GPUS])})",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    totals = generate(args.db, args.rows, seed=args.seed, n_gpus=args.gpus)
    elapsed = time.perf_counter() - started
    print(", ".join(f"{v} {k}" for k, v in totals.items()) + f" in {elapsed:.1f} s -> {args.db} (synthetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
