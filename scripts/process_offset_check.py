"""Where does a measuring process's lifelong offset come from? Fresh processes, each timing the
same calls for several rounds, under arms that each remove (or, `fixed_flush`, hold still) one
candidate cause.

    PYTHONPATH=. python3 scripts/process_offset_check.py [--processes 6] [--rounds 4] [--arms free,pool_per_round] [--out DIR]

Why (issue 11): in the A/A compares on the H200 (2026-11-23) each compare worker carried an
offset for its whole life (the unchanged `sdpa` cases of one compare moved together, −0.7% to
+0.6% per compare) that the rounds inside the two workers did not vary, so a compare's
interval, built from its rounds, cannot see it. The flush buffer's placement, re-drawn every
round since then, was not it (docs/benchmarks/compare.md, "The PR check on the H200").

Each child process does what a compare worker does, with plain torch calls as subjects: per
round it frees the previous round's tensors and the flush buffer, empties the cache, holds a
pseudo-random spacer, allocates a new flush buffer and four new input sets per subject
(rotated call by call, as `input_sets` does), warms up, then times all subjects interleaved with
the harness's own timer and sampler (ci.timing.sampler) and also as CUDA-graph replays
(ci.timing.graphs). Event medians include everything the harness's headline does; graph replays
remove the host from the measurement. Arms, alternated process by process:

* `free`: the child as a compare worker runs it;
* `pinned`: the child bound to one CPU (the same for every pinned child; os.sched_setaffinity
  before torch is imported): tests whether the CPU or NUMA node the host thread lands on matters;
* `companion`: a second, idle process holds a CUDA context and 1 GiB of device memory while the
  child measures, as the other side's worker does in a compare;
* `new_events`: the timer, and so its CUDA events, created anew every round (a worker keeps
  one timer, with the same few events, for its whole life);
* `stream_per_round`: every round's calls on a new CUDA stream;
* `one_connection`: CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream on one hardware queue);
* `stream_pool`: the timer sends successive blocks to successive streams of a pool of
  STREAM_POOL (ci/timing/timers.py CudaEventTimer(streams=...)), so every median mixes them;
* `pool_per_round`: that pool, taken anew every round (`renew_streams`), as a compare worker does;
* `fixed_flush`: the L2 flush buffer allocated once and kept for the process's life (every other
  arm frees it and allocates it anew, behind a pseudo-random spacer, every round, as the engine
  does): run against `free`, a larger between-process sd here says where the buffer sits moves a
  median for a process's whole life (ci/timing/timers.py `L2Flusher`; measured on the H200 as a
  0.45% move of a 17 µs SDPA median, docs/benchmarks/compare.md).

Every round also times the one-launch subject on each of PROBE_STREAMS new streams, which
tells an offset per stream (the hardware queue a stream is mapped to) from one per process.

Besides three SDPA shapes and a 4096^3 matmul, two subjects are almost nothing but launches:
one and four launches of a one-element add per call, which tell an offset per kernel launch
(4x in the second) from one per timed event pair (the same in both).

Analysis, per arm and subject: a one-way random-effects analysis of variance of the per-round log
medians with processes as groups (Fisher's F = between-process mean square / within-process mean
square, df P-1 and P(R-1); the between-process standard deviation by the method of moments,
sqrt((MSB - MSW) / R), Searle, Casella & McCulloch, "Variance Components", 1992, ch. 3). The
shared part: each process's mean deviation over subjects (its offset common to all calls).

What it found on the H200 (docs/benchmarks/compare.md, "Where the process offset came from"): the offset
is a launch cost of about +-100-200 ns per kernel launch that belongs to the stream; only the
arms that change the stream remove it, and the harness now times on a pool of streams that a
compare worker renews every round.

Writes process_offset.json under --out (default $OUT) and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

SUBJECTS = {  # name -> (batch, heads, seq_len, head_dim, causal), or None for a 4096^3 fp16 matmul
    "sdpa/h100_small/causal": (1, 16, 1024, 64, True),
    "sdpa/h100_small/noncausal": (1, 16, 1024, 64, False),
    "sdpa/b4_h16_s1k/causal": (4, 16, 1024, 64, True),
    "matmul_4096": None,
    "tiny_x1": 1,  # one launch of a one-element add: almost nothing but the launch and the events around it
    "tiny_x4": 4,  # four such launches per call: an offset per launch reads 4x here, one per event pair 1x
}
INPUT_SETS = 4
SPACER_STEPS, SPACER_STEP_BYTES = 64, 256 * 1024
ARMS = (
    "free",
    "pinned",
    "companion",
    "new_events",
    "stream_per_round",
    "one_connection",
    "stream_pool",
    "pool_per_round",
    "fixed_flush",
)
PROBE_STREAMS = 8
STREAM_POOL = 8


# -- the child: one measuring process --------------------------------------------------------


def _cpu_now() -> int:
    """The CPU this thread last ran on (/proc/self/stat field 39)."""
    fields = Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[36])


def _numa_node(cpu: int) -> int | None:
    for entry in Path(f"/sys/devices/system/cpu/cpu{cpu}").glob("node*"):
        return int(entry.name[4:])
    return None


def _make_inputs(torch, name: str, seed: int):
    spec = SUBJECTS[name]
    generator = torch.Generator(device="cuda").manual_seed(seed)
    if isinstance(spec, int):
        x = torch.zeros(1, device="cuda")

        def launches():
            for _ in range(spec):
                x.add_(1.0)

        return launches, x.data_ptr()
    if spec is None:
        a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16, generator=generator) for _ in range(2))
        return (lambda: a @ b), a.data_ptr()
    batch, heads, seq, dim, causal = spec
    q, k, v = (
        torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16, generator=generator) for _ in range(3)
    )
    return (lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)), q.data_ptr()


def _rotating(fns):
    state = {"i": 0}

    def call():
        i = state["i"]
        state["i"] = (i + 1) % len(fns)
        return fns[i]()

    return call


def _probe_streams(torch, config, timer, flusher, measure_interleaved, Subject, NullMonitor) -> list[float]:
    """tiny_x1's median on each of PROBE_STREAMS new streams: is the offset per stream?"""
    fn, _ = _make_inputs(torch, "tiny_x1", 0)
    medians = []
    for _ in range(PROBE_STREAMS):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            raw = measure_interleaved([Subject("probe", fn)], config, timer, flusher, NullMonitor())["probe"]
            torch.cuda.synchronize()
        medians.append(statistics.median(raw.samples_us))
    return medians


def child(rounds: int, seed: int, new_events: bool, stream_per_round: bool, pool: int, fixed_flush: bool) -> dict:
    import torch

    from attnwatch.ci.run_config import compare_sampling, timing_config
    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NullMonitor
    from attnwatch.ci.timing.graphs import graph_replay_us
    from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher

    config = timing_config("cuda").with_overrides(**compare_sampling("cuda"))
    device = torch.device("cuda")
    nbytes = int(config.flush_l2_multiple * torch.cuda.get_device_properties(device).L2_cache_size)
    flusher = L2Flusher(device, nbytes)
    timer = CudaEventTimer(config.block_calls, streams=pool)
    rows = []
    for r in range(rounds):
        if not (fixed_flush and r):
            flusher.release()
        if new_events and r:
            timer = CudaEventTimer(config.block_calls)
        torch.cuda.empty_cache()
        steps = random.Random(f"{seed}/{r}").randrange(SPACER_STEPS)
        spacer = torch.empty(steps * SPACER_STEP_BYTES, dtype=torch.uint8, device=device) if steps else None
        if not (fixed_flush and r):
            flusher.allocate()
        subjects, pointers = [], {}
        for name in SUBJECTS:
            made = [_make_inputs(torch, name, 1000 * r + j) for j in range(INPUT_SETS)]
            subjects.append(Subject(name, _rotating([fn for fn, _ in made])))
            pointers[name] = [hex(p) for _, p in made]
        if stream_per_round and pool > 1:
            timer.renew_streams()
        stream = torch.cuda.Stream() if stream_per_round and pool == 1 else torch.cuda.current_stream()
        with torch.cuda.stream(stream):
            for i, subject in enumerate(subjects):
                warm_up(subject.fn, config if i == 0 else config.with_overrides(warmup_min_s=0.0), timer, flusher)
            raws = measure_interleaved(subjects, config, timer, flusher, NullMonitor())
            torch.cuda.synchronize()
        graphs = {s.key: graph_replay_us(s.fn, flusher, config.graph_calls, config.graph_replays)[0] for s in subjects}
        probe = _probe_streams(torch, config, timer, flusher, measure_interleaved, Subject, NullMonitor)
        rows.append(
            {
                "round": r,
                "cpu": _cpu_now(),
                "spacer_steps": steps,
                "event_median_us": {k: statistics.median(v.samples_us) for k, v in raws.items()},
                "calls": {k: len(v.samples_us) for k, v in raws.items()},
                "graph_median_us": graphs,
                "probe_stream_tiny_us": probe,
                "input_pointers": pointers,
                "flush_pointer": hex(flusher._buffer.data_ptr()),
            }
        )
        del subjects, spacer
    return {"pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)), "rounds": rows}


def companion() -> None:
    """Hold a CUDA context and 1 GiB until stdin closes (the other side's idle worker)."""
    import torch

    held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()
    del held


# -- the parent: arms, processes, analysis ---------------------------------------------------


def child_command(arm: str, rounds: int, seed: int, pin_cpu: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one measuring child of `arm`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, __file__, "--child", "--rounds", str(rounds), "--seed", str(seed)]
    if arm == "pinned":
        command += ["--pin", str(pin_cpu)]
    if arm == "new_events":
        command += ["--new-events"]
    if arm == "stream_per_round":
        command += ["--stream-per-round"]
    if arm == "pool_per_round":
        command += ["--pool", str(STREAM_POOL), "--stream-per-round"]
    if arm == "stream_pool":
        command += ["--pool", str(STREAM_POOL)]
    if arm == "fixed_flush":
        command += ["--fixed-flush"]
    if arm == "one_connection":
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return command, env


def run_child(arm: str, rounds: int, seed: int, pin_cpu: int) -> dict:
    command, env = child_command(arm, rounds, seed, pin_cpu)
    held = None
    if arm == "companion":
        held = subprocess.Popen(
            [sys.executable, __file__, "--companion"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        held.stdout.readline()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
    finally:
        if held is not None:
            held.stdin.close()
            held.wait(timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"child ({arm}) failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def anova(groups: list[list[float]]) -> dict:
    """One-way random-effects ANOVA (module docstring) of log values grouped by process, in %."""
    from attnwatch.history.analysis.statistics import one_way_anova

    a = one_way_anova(groups)
    return {
        "F": a.f,
        "df": [a.df_between, a.df_within],
        "p": a.p_value(),
        "within_sd_pct": 100 * a.within_sd,
        "between_sd_pct": 100 * a.between_sd,
    }


def analyse(processes: list[dict]) -> dict:
    out: dict = {}
    for arm in ARMS:
        mine = [p for p in processes if p["arm"] == arm]
        if len(mine) < 2:
            continue
        out[arm] = {}
        for timing in ("event_median_us", "graph_median_us"):
            per_subject = {}
            logs_by_subject = {}
            for name in SUBJECTS:
                groups = [[math.log(rw[timing][name]) for rw in p["rounds"] if rw[timing].get(name)] for p in mine]
                if any(len(g) < 2 for g in groups):
                    continue
                logs_by_subject[name] = groups
                per_subject[name] = anova(groups)
            shared = []
            for i in range(len(mine)):  # process i's mean deviation over subjects
                devs = [
                    statistics.fmean(groups[i]) - statistics.fmean([x for g in groups for x in g])
                    for groups in logs_by_subject.values()
                ]
                shared.append(100 * statistics.fmean(devs) if devs else float("nan"))
            out[arm][timing] = {"subjects": per_subject, "process_shared_offset_pct": shared}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=6, help="processes per arm")
    p.add_argument("--rounds", type=int, default=4, help="rounds per process")
    p.add_argument("--arms", default="free,pool_per_round", help=f"comma-separated subset of {', '.join(ARMS)}")
    p.add_argument(
        "--pin-cpu", type=int, default=None, help="CPU of the pinned arm (default: the lowest this process may use)"
    )
    p.add_argument("--out", default=None)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--companion", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--pin", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--new-events", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--stream-per-round", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--pool", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--fixed-flush", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.companion:
        companion()
        return 0
    if args.child:
        if args.pin is not None:
            os.sched_setaffinity(0, {args.pin})
        print(
            json.dumps(
                child(args.rounds, args.seed, args.new_events, args.stream_per_round, args.pool, args.fixed_flush)
            )
        )
        return 0

    arms = [a for a in args.arms.split(",") if a]
    unknown = set(arms) - set(ARMS)
    if unknown:
        p.error(f"unknown arm(s) {sorted(unknown)}; known: {', '.join(ARMS)}")
    pin_cpu = args.pin_cpu if args.pin_cpu is not None else min(os.sched_getaffinity(0))
    processes = []
    started = time.time()
    for i in range(args.processes):
        for arm in arms:
            result = run_child(arm, args.rounds, seed=len(processes), pin_cpu=pin_cpu)
            cpus = sorted({rw["cpu"] for rw in result["rounds"]})
            processes.append(
                {"arm": arm, "index": i, "cpus": cpus, "numa_nodes": sorted({_numa_node(c) for c in cpus}), **result}
            )
            print(f"[{time.time() - started:6.1f}s] {arm} #{i}: cpus {cpus}", flush=True)
    out = Path(args.out or os.environ.get("OUT") or "out/process_offset")
    out.mkdir(parents=True, exist_ok=True)
    (out / "process_offset.json").write_text(json.dumps({"processes": processes, "pin_cpu": pin_cpu}))
    analysis = analyse(processes)
    (out / "process_offset.json").write_text(
        json.dumps(
            {"processes": processes, "analysis": analysis, "pin_cpu": pin_cpu, "wall_s": time.time() - started},
            indent=1,
        )
    )
    print(f"\n{'arm':<10} {'timing':<6} {'subject':<28} {'between-process sd':>19} {'within sd':>10} {'F':>7}  p")
    for arm, by_timing in analysis.items():
        for timing, block in by_timing.items():
            short = "events" if timing.startswith("event") else "graph"
            for name, a in block["subjects"].items():
                p_text = f"{a['p']:.3g}" if a["p"] is not None else "n/a"
                print(
                    f"{arm:<10} {short:<6} {name:<28} {a['between_sd_pct']:>18.2f}% {a['within_sd_pct']:>9.2f}% "
                    f"{a['F']:>7.2f}  {p_text}"
                )
            offsets = ", ".join(f"{x:+.2f}" for x in block["process_shared_offset_pct"])
            print(f"{arm:<10} {short:<6} shared offset per process (%): {offsets}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
