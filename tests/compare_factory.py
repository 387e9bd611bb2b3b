"""Builds A/B rounds and compare reports from the recorded H200 samples (tests only).

The fixture holds 300 per-call latencies per case from two processes. Base rounds come from
process 0 and head rounds from process 1 (so the process-to-process offset is in the data),
each split into `rounds` consecutive chunks; `slowdown` multiplies chosen head cases.
Fixture cases map to the named shapes of the same size (fp16; the recording does not say
causal, it is filed as noncausal here).
"""

from __future__ import annotations

import json
from pathlib import Path

from attnwatch.ci.compare.analysis import compare_rounds
from attnwatch.ci.compare.report import CompareReport
from attnwatch.ci.compare.rounds import CaseRound, RoundData
from attnwatch.history.analysis.thresholds import load_thresholds

SHAPE_OF = {"B1_H16_S1024_D64": "h100_small", "B4_H16_S1024_D64": "b4_h16_s1k", "B16_H16_S2048_D64": "b16_h16_s2k"}
GPU = "NVIDIA H200"


def fixture_processes(fixtures_dir: Path) -> dict[str, dict[str, list[float]]]:
    """{process: {case_id: samples}} with attnwatch case ids."""
    raw = json.loads((fixtures_dir / "timing" / "h200_event_samples.json").read_text())
    out = {}
    for proc, cases in raw["processes"].items():
        out[proc] = {}
        for key, value in cases.items():
            variant, shape = key.split("/")
            out[proc][f"{variant}/{SHAPE_OF[shape]}/fp16/noncausal"] = value["us"]
    return out


def make_rounds(
    fixtures_dir: Path,
    *,
    rounds: int = 3,
    slowdown: dict[str, float] | None = None,
    head_status: dict[str, str] | None = None,
    head_incorrect: set[str] | None = None,
    ncu: bool = False,
    counters: dict[str, tuple[dict, dict]] | None = None,
) -> tuple[list[RoundData], list[RoundData]]:
    """`counters`: case id -> (base, head) ncu counters, as a profiled side's rounds carry them."""
    procs = fixture_processes(fixtures_dir)
    slowdown, head_status, head_incorrect = slowdown or {}, head_status or {}, head_incorrect or set()
    sdpa_key = lambda cid: "sdpa_cudnn/" + "/".join(cid.split("/")[1:])  # noqa: E731

    def side(proc: str, is_head: bool) -> list[RoundData]:
        data = procs[proc]
        out = []
        for r in range(rounds):
            cases = {}
            for cid, samples in data.items():
                chunk = len(samples) // rounds
                part = samples[r * chunk : (r + 1) * chunk]
                factor = slowdown.get(cid, 1.0) if is_head else 1.0
                variant, shape, dtype, causal = cid.split("/")
                ref = data[sdpa_key(cid)][r * chunk : (r + 1) * chunk]
                status = head_status.get(cid, "ok") if is_head else "ok"
                case = CaseRound(
                    cid,
                    variant,
                    shape,
                    dtype,
                    causal == "causal",
                    status,
                    samples_us=[s * factor for s in part] if status == "ok" else [],
                    gap_to_baseline=sorted(part)[len(part) // 2] * factor / sorted(ref)[len(ref) // 2],
                    baseline_variant="sdpa",
                    correct=not (is_head and cid in head_incorrect),
                    max_abs_err=0.5 if is_head and cid in head_incorrect else 1e-3,
                    rel_err=0.2 if is_head and cid in head_incorrect else 1e-4,
                    error="head output differs from the float64 reference"
                    if is_head and cid in head_incorrect
                    else None,
                )
                if status != "ok":
                    case.error = f"{status}: illegal memory access"
                if ncu:
                    case.ncu = {
                        "duration_us": sorted(part)[len(part) // 2] * factor,
                        "sm_throughput_pct": 71.0 / factor,
                        "registers_per_thread": 128.0 if not is_head or factor == 1.0 else 168.0,
                    }
                if counters and cid in counters:
                    case.counters = dict(counters[cid][1 if is_head else 0])
                cases[cid] = case
            out.append(RoundData(f"{proc}-round{r}", GPU, "b" * 40 if not is_head else "h" * 40, cases))
        return out

    return side("process0", False), side("process1", True)


def make_report(fixtures_dir: Path, **kwargs) -> CompareReport:
    base, head = make_rounds(fixtures_dir, **{k: v for k, v in kwargs.items() if k not in ("method", "rules")})
    method = kwargs.get("method", "hierarchical")
    th = load_thresholds(GPU)
    cases = compare_rounds(
        base, head, th, method=method, resamples=400, **({"rules": kwargs["rules"]} if "rules" in kwargs else {})
    )
    return CompareReport(
        base_sha="a" * 40,
        head_sha="c" * 40,
        merge_base_sha="a" * 40,
        gpu_name=GPU,
        rounds=len(base),
        method=method,
        confidence=th.confidence,
        min_effect=th.min_effect,
        shape_set="pr",
        created_at="2026-11-21T12:00:00Z",
        cases=cases,
        base_ref="main",
        head_ref="feature/faster-softmax",
        repo="octo/kernels",
    )
