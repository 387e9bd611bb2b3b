"""One measuring process of scripts/power_check.py (`--child N`): NVML polled on a thread while
attnwatch's engine times the long and small cases under each recipe; the first process also
takes the evidence (NVML's read rate, busy fractions, flush off, per-sample clocks). Writes
its figures as JSON to `--result` for the parent to aggregate."""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

TRACE_POINTS = 20_000  # the NVML trace kept per process, evenly thinned
SAMPLE_POINTS = 3_000  # per-sample times and clocks kept per case


def device_kind(args) -> str:
    """`--device`, or "cuda" where torch sees a GPU."""
    if args.device != "auto":
        return args.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Poller:
    """The SM clock, power draw and clocks-event mask, polled on a thread every ~1 ms."""

    def __init__(self, monitor) -> None:
        self.nvml, self.handle = getattr(monitor, "_nvml", None), getattr(monitor, "_handle", None)
        self.points: list[tuple[float, int, float, int]] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read(self) -> tuple[int, float, int]:
        n, h = self.nvml, self.handle
        reasons = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return (
            int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            int(reasons(h)),
        )

    def rate(self, seconds: float = 0.5) -> dict:
        """NVML at its fastest: reads per second, and how often each value changed."""
        values, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            values.append((time.perf_counter(), *self.read()))
        span = values[-1][0] - values[0][0]
        changes = lambda i: sum(1 for a, b in zip(values, values[1:]) if a[i] != b[i])  # noqa: E731
        return {
            "reads_per_s": len(values) / max(span, 1e-9),
            "clock_changes_per_s": changes(1) / max(span, 1e-9),
            "power_changes_per_s": changes(2) / max(span, 1e-9),
        }

    def start(self) -> None:
        if self.available:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.points.append((time.perf_counter() - self.t0, *self.read()))
            except Exception:  # noqa: BLE001 - a failed read is a gap in the trace, not a failed check
                pass
            time.sleep(0.001)

    def window(self, t0: float, t1: float) -> dict:
        """Clock, power and capped share between two times of this process (phase statistics)."""
        pts = [p for p in self.points if t0 <= p[0] <= t1]
        if not pts:
            return {}
        clocks, power = [p[1] for p in pts], [p[2] for p in pts]
        return {
            "reads": len(pts),
            "clock_median_mhz": statistics.median(clocks),
            "clock_min_mhz": min(clocks),
            "power_mean_w": statistics.fmean(power),
            "power_max_w": max(power),
            "power_capped_share": sum(1 for p in pts if p[3] & 0x4) / len(pts),
        }


class KeepNoFlush:
    """No L2 flush (the flush on/off evidence), with the flusher's release/allocate."""

    nbytes = 0

    def flush(self) -> None:
        return None

    def release(self) -> None:
        return None

    def allocate(self) -> None:
        return None


def child(args) -> int:
    from attnwatch.ci.engine.group import Engine
    from attnwatch.ci.plan import RunPlan
    from attnwatch.ci.run_config import timing_config, with_recipe
    from attnwatch.ci.selection import select_cases

    kind = device_kind(args)
    shapes = "cpu_tiny" if args.smoke else f"{args.long},{args.small}"
    long_ids = {"cpu_tiny"} if args.smoke else set(args.long.split(","))
    cases = select_cases(shapes, args.variants, "fp16", "both", kind).cases
    base = timing_config(kind)
    if args.smoke:
        base = base.with_overrides(min_samples=6, max_samples=12, time_cap_s=0.2, warmup_min_s=0.0)
    plan = RunPlan(cases=cases, timing=base.to_dict(), device_kind=kind, correctness=False)
    engine = Engine(plan, lambda kind_, **fields: None)
    engine.build_all()
    poller = Poller(engine.monitor)
    from attnwatch.ci.environment import device_properties

    out = {
        "child": args.child,
        "device": kind,
        "gpu_name": device_properties().get("gpu_name"),
        "phases": [],
        "results": [],
        "evidence": {},
        "samples": {},
    }
    if poller.available:
        out["evidence"]["nvml_rate"] = poller.rate()
        out["evidence"]["power_limit_w"] = engine.monitor.power_limit_w()
        out["evidence"]["sm_clock_max_mhz"] = engine.monitor.max_sm_clock_mhz()
    poller.start()
    recipes = args.recipes.split(",")
    round_index = 0

    def measure(label, members, config, recipe, keep_samples=False):
        nonlocal round_index
        t0, timing0 = time.perf_counter(), engine.seconds["timing"]
        call = round_index
        results = engine.measure(members, round_index, sampling=config.to_dict())
        round_index += 1
        t1 = time.perf_counter()
        out["phases"].append(
            {
                "label": label,
                "recipe": recipe,
                "group": members[0].group,
                "t0": t0 - poller.t0,
                "t1": t1 - poller.t0,
                **poller.window(t0 - poller.t0, t1 - poller.t0),
            }
        )
        rows = []
        for case in members:
            r = results[case.case_id]
            row = {
                "label": label,
                "call": call,
                "recipe": recipe,
                "case_id": case.case_id,
                "group": case.group,
                "long": case.shape_id in long_ids,
                "status": r.status,
                "error": r.error,
                "timing_s": engine.seconds["timing"] - timing0,
                "wall_s": t1 - t0,
            }
            if r.timing:
                row.update(
                    {
                        k: r.timing.get(k)
                        for k in (
                            "median_us",
                            "rel_spread",
                            "converged",
                            "n",
                            "tflops",
                            "throttle_reasons",
                            "throttled_samples",
                            "sm_clock_median_mhz",
                            "sm_clock_min_mhz",
                            "sm_clock_max_mhz",
                            "clock_normalised_median_us",
                            "band_discarded_samples",
                            "pacing_gap_s",
                            "timing_recipe",
                            "sm_clock_mhz_before",
                            "sm_clock_mhz_after",
                        )
                    }
                )
            if keep_samples and r.samples_us:
                step = max(1, len(r.samples_us) // SAMPLE_POINTS)
                out["samples"][f"{label}:{case.case_id}"] = {
                    "samples_us": r.samples_us[::step],
                    "clocks_mhz": r.clocks_mhz[::step],
                }
            rows.append(row)
        out["results"].extend(rows)
        return rows

    deadline = args.deadline or (time.time() + args.budget_s)
    clock_config = with_recipe(base, "clock")
    long_cases = [c for c in cases if c.shape_id in long_ids]
    if args.child == 0 and long_cases:  # evidence: one long case alone
        one = [next((c for c in long_cases if c.variant == "sdpa_cudnn"), long_cases[0])]
        for duty in (1.0, 0.75, 0.5, 0.33):
            if time.time() > deadline - 5:
                break
            config = (
                clock_config
                if duty == 1.0
                else clock_config.with_overrides(pacing="duty", pacing_duty=duty, recipe=f"clock_duty{duty}")
            )
            measure(f"duty={duty}", one, config, "clock", keep_samples=True)
        if time.time() < deadline - 5:
            flusher, engine.flusher = engine.flusher, KeepNoFlush()
            try:
                measure("flush=off", one, clock_config, "clock", keep_samples=True)
            finally:
                engine.flusher = flusher
    groups: dict[str, list] = {}
    for case in sorted(cases, key=lambda c: c.shape_id in long_ids):  # small first: a late cut costs a long group
        groups.setdefault(case.group, []).append(case)
    for g, members in enumerate(groups.values()):
        order = recipes[g % len(recipes) :] + recipes[: g % len(recipes)]
        for recipe in order:
            if time.time() > deadline - 5:
                out["truncated"] = True
                break
            measure(
                "compare",
                members,
                with_recipe(base, recipe),
                recipe,
                keep_samples=args.child == 0 and recipe == "clock",
            )
    poller.stop()
    step = max(1, len(poller.points) // TRACE_POINTS)
    out["trace"] = poller.points[::step]
    Path(args.result).write_text(json.dumps(out), encoding="utf-8")
    return 0
