"""A small but complete history for the dashboard's tests, built the way production builds one:
real bundle directories (tests/bundle_factory.py) ingested by history.ingest.write, alerts found
by the project's own detection.

What it holds, and why each part is there:
  - 8 main runs on an NVIDIA H200, an hour apart, 4 variants x 2 shapes x fp16 x causal/not,
    with samples: trends, sparklines, compare intervals;
  - triton_fa2 10% slower from run 5 on: detection (history.detection.scan, as `attnwatch
    detect` runs it) raises latency and gap-to-SDPA regressions there for each triton case;
  - ncu metrics in the last two runs: Kernel page and roofline;
  - a hostile commit message in run 6: nothing may render it as HTML or markdown;
  - a crashed case and a failed correctness case (a correctness alert) in the newest complete run;
  - a failed main run after it: Overview must say the newest run did not complete;
  - a pull-request run on another branch;
  - a main run on an NVIDIA L4 without any SDPA variant: gap-to-SDPA is empty there.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from bundle_factory import SHAPES, case_id, make_bundle
from history_copies import built_once
from attnwatch.history.detection.alerts import record_alerts
from attnwatch.history.detection.scan import scan_history
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.store.db import open_write
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

H200 = "NVIDIA H200"
L4 = "NVIDIA L4"
VARIANTS = ("sdpa", "sdpa_flash", "triton_fa2", "cuda_wmma")
MAIN_RUNS = 8
STEP_RUN = 5
HOSTILE_MESSAGE = "<script>alert('x')</script> <b>bold</b> **stars** [link](javascript:alert(1)) $x$"
START = datetime(2026, 11, 1, 8, 0, tzinfo=timezone.utc)
REGRESSED_CASE = case_id("triton_fa2", SHAPES[0].id, "fp16", False)
CRASHED_CASE = case_id("cuda_wmma", SHAPES[1].id, "fp16", True)
INCORRECT_CASE = case_id("cuda_wmma", SHAPES[0].id, "fp16", False)


def main_run_id(i: int) -> str:
    return f"h200-main-{i:02d}"


@built_once
def build_history(db_path: Path, work_dir: Path) -> dict[str, str]:
    """Write the bundles under `work_dir`, ingest them into `db_path`, run detection.
    Returns named run ids for assertions."""
    bundles = []
    for i in range(MAIN_RUNS):
        statuses = {CRASHED_CASE: "crashed", INCORRECT_CASE: "failed"} if i == MAIN_RUNS - 1 else None
        bundles.append(
            make_bundle(
                work_dir / main_run_id(i),
                run_id=main_run_id(i),
                variants=VARIANTS,
                seed=i,
                commit_sha=f"{i:02d}" + "c0ffee" * 6 + "00",
                commit_message=HOSTILE_MESSAGE if i == 6 else f"Tune tiles, step {i}",
                started_at=START + timedelta(hours=i),
                statuses=statuses,
                variant_scale={"triton_fa2": 1.10} if i >= STEP_RUN else None,
                with_ncu=i >= MAIN_RUNS - 2,
            )
        )
    bundles.append(
        make_bundle(
            work_dir / "h200-main-failed",
            run_id="h200-main-failed",
            variants=("sdpa",),
            n_cases=1,
            run_status="failed",
            statuses={"sdpa": "crashed"},
            started_at=START + timedelta(hours=MAIN_RUNS),
            seed=99,
            commit_message="Break the build",
        )
    )
    bundles.append(
        make_bundle(
            work_dir / "h200-pr-12",
            run_id="h200-pr-12",
            variants=VARIANTS,
            branch="feature/tiles",
            pr_number=12,
            trigger="pull_request",
            started_at=START + timedelta(hours=MAIN_RUNS, minutes=30),
            seed=50,
            commit_message="Try 128x64 tiles",
        )
    )
    bundles.append(
        make_bundle(
            work_dir / "l4-main-00",
            run_id="l4-main-00",
            variants=("triton_fa2", "cuda_wmma"),
            gpu_name=L4,
            started_at=START + timedelta(hours=2),
            seed=77,
            commit_message="Tune tiles, step 2",
        )
    )
    ingest_paths(parse_location(db_path), bundles)
    with open_write(parse_location(db_path)) as con:  # what `attnwatch detect` does after a main ingest
        record_alerts(con, scan_history(con, load_thresholds).findings)
    return {
        "latest_complete": main_run_id(MAIN_RUNS - 1),
        "failed": "h200-main-failed",
        "pr": "h200-pr-12",
        "l4": "l4-main-00",
        "before_step": main_run_id(STEP_RUN - 1),
        "after_step": main_run_id(STEP_RUN),
    }


def build_synthetic_history(db_path: Path, work_dir: Path) -> None:
    """Two generated runs marked synthetic: every page must label them as not measured."""
    bundles = [
        make_bundle(
            work_dir / f"syn-{i}",
            run_id=f"syn-{i}",
            variants=("sdpa", "triton_fa2"),
            synthetic=True,
            started_at=START + timedelta(hours=i),
            seed=i,
        )
        for i in range(2)
    ]
    ingest_paths(parse_location(db_path), bundles)


NCU_RUN = "h200-nightly-ncu"
NCU_FIXTURE = "ncu/h200_raw_sdpa_flash_3op.csv"
# The fixture's NVTX ranges, and the case each was measured as (fp16, B=4 H=16 S=1024 D=64).
NCU_RANGES = {"sdpa": "sdpa", "sdpa_flash": "sdpa_flash", "torch_3op": "torch_3op"}


def add_real_ncu_run(db_path: Path, work_dir: Path, fixtures_dir: Path) -> str:
    """A nightly main run whose ncu metrics are the real H200 Nsight Compute CSV from the
    shared fixtures, parsed and aggregated by the project's own ncu code (ci.ncu)."""
    from attnwatch.ci.ncu.aggregate import CaseWork, aggregate_case, group_by_case
    from attnwatch.ci.ncu.parse import parse_ncu_csv
    from attnwatch.history.contract.bundle import NcuKernelRow
    from attnwatch.history.contract.bundle_writer import NcuFiles, write_ncu_files

    shape = next(s for s in SHAPES if s.id == "b4_h16_s1k")
    directory = make_bundle(
        work_dir / NCU_RUN,
        run_id=NCU_RUN,
        variants=tuple(NCU_RANGES),
        shapes=(shape,),
        causal=(False,),
        trigger="schedule",
        started_at=START - timedelta(hours=1),
        seed=123,
        commit_message="Nightly",
        with_ncu=True,
    )
    report = parse_ncu_csv(fixtures_dir / NCU_FIXTURE)
    work = CaseWork(
        flops=shape.flops(False), ideal_bytes=4.0 * shape.batch * shape.heads * shape.seq * shape.head_dim * 2
    )
    kernels, cases = [], []
    for nvtx, kernels_of_case in group_by_case(report.kernels).items():
        cid = case_id(NCU_RANGES[nvtx], shape.id, "fp16", False)
        cases.append(aggregate_case(cid, kernels_of_case, work))
        kernels += [
            NcuKernelRow(cid, i, k.kernel_name, k.metrics, k.block_size, k.grid_size)
            for i, k in enumerate(kernels_of_case)
        ]
    write_ncu_files(directory, NcuFiles("2025.3.1", kernels, cases))  # over the factory's stand-in ncu.json
    ingest_paths(parse_location(db_path), [directory])
    return NCU_RUN


# --- A push on two GPUs --------------------------------------------------------------------------
#
# What `build_push_history` holds, and why each part is there:
#   - PUSH_RUNS main commits, each measured on an H200 and an H100 (one shared commit per run);
#   - cuda_wmma 8% slower from commit OLD_STEP on both GPUs: detection raises latency and
#     gap-to-SDPA regressions on both, which the Alerts page groups under one commit range;
#   - the last push (the newest commit): triton_fa2 12% slower on both GPUs (too recent for
#     detection, which waits for min_persist runs: only the first page's run-to-run comparison
#     shows it), one of them (NOISY_CASE on the H100) not converged, and DISPATCH_CASE
#     launch-bound on the H200 (graph replay far below the event time);
#   - a correctness failure (PUSH_INCORRECT_CASE) in the newest H200 run, and no correctness
#     check at all in the newest H100 run (it must read "not run", never "0 failures").

H100 = "NVIDIA H100 80GB HBM3"
PUSH_GPUS = (H200, H100)
PUSH_RUNS = 8
OLD_STEP = 3
PUSH_REGRESSED_VARIANT = "triton_fa2"
OLD_REGRESSED_VARIANT = "cuda_wmma"
PUSH_INCORRECT_CASE = case_id("sdpa_flash", SHAPES[1].id, "fp16", True)
NOISY_CASE = case_id("triton_fa2", SHAPES[1].id, "fp16", True)
DISPATCH_CASE = case_id("sdpa_flash", SHAPES[0].id, "fp16", False)
DISPATCH_GRAPH_US = 0.6  # the graph-replay median planted for DISPATCH_CASE (events read ~1.9 µs)


def push_commit(i: int) -> str:
    return f"{i:02d}" + "beef" * 9 + "00"


def push_run_id(gpu: str, i: int) -> str:
    return f"{'h200' if gpu == H200 else 'h100'}-push-{i:02d}"


@built_once
def build_push_history(db_path: Path, work_dir: Path) -> dict[str, str]:
    """Write and ingest the two-GPU push history, run detection; returns named ids."""
    ingest_paths(parse_location(db_path), push_bundles(work_dir))
    with open_write(parse_location(db_path)) as con:
        record_alerts(con, scan_history(con, load_thresholds).findings)
    return push_ids()


def push_bundles(work_dir: Path, branch: str = "main") -> list[Path]:
    """The two-GPU push history's bundles, every run on `branch`."""
    bundles = []
    last = PUSH_RUNS - 1
    for g, gpu in enumerate(PUSH_GPUS):
        for i in range(PUSH_RUNS):
            scale = {}
            if i >= OLD_STEP:
                scale[OLD_REGRESSED_VARIANT] = 1.08
            if i == last:
                scale[PUSH_REGRESSED_VARIANT] = 1.12
            overrides = {}
            if gpu == H200 and i >= last - 1:
                overrides[DISPATCH_CASE] = {"graph_median_us": DISPATCH_GRAPH_US}
            if gpu == H100 and i == last:
                overrides[NOISY_CASE] = {"converged": False, "rel_spread": 0.08}
            bundles.append(
                make_bundle(
                    work_dir / push_run_id(gpu, i),
                    run_id=push_run_id(gpu, i),
                    variants=VARIANTS,
                    seed=100 * g + i,
                    gpu_name=gpu,
                    commit_sha=push_commit(i),
                    parent_sha=push_commit(i - 1) if i else None,
                    commit_message=f"Push {i}: tune tiles",
                    started_at=START + timedelta(hours=i, minutes=10 * g),
                    commit_date=START + timedelta(hours=i, minutes=-10),
                    variant_scale=scale or None,
                    statuses={PUSH_INCORRECT_CASE: "failed"} if gpu == H200 and i == last else None,
                    with_correctness=not (gpu == H100 and i == last),
                    timing_overrides=overrides or None,
                    branch=branch,
                )
            )
    return bundles


def push_ids() -> dict[str, str]:
    """Named run ids and commits of the push history."""
    last = PUSH_RUNS - 1
    return {
        "h200_head": push_run_id(H200, last),
        "h200_base": push_run_id(H200, last - 1),
        "h100_head": push_run_id(H100, last),
        "h100_base": push_run_id(H100, last - 1),
        "old_step_commit": push_commit(OLD_STEP),
        "old_step_base": push_commit(OLD_STEP - 1),
        "head_commit": push_commit(last),
        "base_commit": push_commit(last - 1),
    }
