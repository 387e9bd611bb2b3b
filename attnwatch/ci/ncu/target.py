"""The program ncu profiles: prepare each case, warm it up, then run it once inside its NVTX range.

Run as `python -m attnwatch.ci.ncu.target PLAN.json`, one process for every case of the plan (torch is
imported once; each variant's build comes from the compile cache). A plan's `stop_at` (epoch
seconds) is when no further case starts, so the profiler still writes its report before the
run's deadline; later cases are reported with status "deadline". Profiling is off at start
(`ncu --profile-from-start off`); compilation, autotuning and warm-up happen outside it, and
only the one call per case between `cudaProfilerStart` and `cudaProfilerStop` is measured,
attributed to the case by an NVTX range named with the case id: ncu replays exactly the
kernels of that one call. After each case its tensors are freed and torch's cached blocks given
back (`empty_cache`), so the device memory ncu may save and restore around a multi-pass kernel
holds no earlier case's blocks; a garbage collection runs only when dropping the case left
memory allocated (clean-up took 0.15 s per case on the H200 when it always collected, 0.002-0.007
s since: docs/benchmarks/ncu.md "Nsight Compute: which counters cost passes"). The variants are told
they run under a profiler (kernels.capabilities UNDER_PROFILER_ENV, set by ci/ncu/profile.py), so
none starts a profiler of its own beside ncu. Each case's outcome, with its stages' seconds,
is printed as one line starting with `attnwatch-ncu:` so the parent can tell a case that could
not run from one ncu did not see.
"""

from __future__ import annotations

import gc
import json
import sys
import time

from attnwatch.ci.kernels_api import kernels_api

OUTCOME_PREFIX = "attnwatch-ncu:"
WARMUP_CALLS = 3


def _report(case_id: str, status: str, error: str | None = None, phases: dict[str, float] | None = None) -> None:
    record: dict[str, object] = {"case_id": case_id, "status": status, "error": error}
    if phases:
        record["phases"] = {k: round(v, 4) for k, v in phases.items()}
    print(OUTCOME_PREFIX + json.dumps(record), flush=True)


def case_of(api, entry: dict):
    """The kernels-side case of a plan entry (ci/ncu/profile.py `plan_entry` writes it)."""
    if entry.get("operator", "attention") == "attention":
        return api.Case(entry["variant"], api.Shape(**entry["shape"]), entry["dtype"], bool(entry["causal"]))
    return api.Case(
        entry["variant"], api.SHAPES[entry["shape_id"]], entry["dtype"], mode=entry["mode"], operator=entry["operator"]
    )


def _entry_id(api, entry: dict) -> str:
    shape = entry.get("shape_id") or (entry.get("shape") or {}).get("id", "?")
    mode = entry.get("mode") or ("causal" if entry.get("causal") else "noncausal")
    return api.case_id(entry["variant"], shape, entry["dtype"], mode)


def main(argv: list[str]) -> int:
    import torch

    plan = json.loads(open(argv[0], encoding="utf-8").read())
    stop_at = plan.get("stop_at")
    device = torch.device("cuda")
    if torch.cuda.is_available():
        torch.empty(1, device=device)  # the context (and ncu's set-up of it) before the first case's clock starts
    api = kernels_api()  # the profiled checkout's kernels (compare profiles the base's too)
    for entry in plan["cases"]:
        try:
            case = case_of(api, entry)
        except Exception as exc:  # noqa: BLE001 - a case this side cannot build is that case's failure
            _report(_entry_id(api, entry), "failed", f"{type(exc).__name__}: {exc}")
            continue
        if stop_at is not None and time.time() >= stop_at:
            _report(case.id, "deadline", "not started: the run's deadline is near")
            continue
        prepared = None
        clock = _PhaseClock()
        allocated = torch.cuda.memory_allocated()
        try:
            variant = api.get(case.variant)
            reason = variant.unsupported(case)
            if reason:
                _report(case.id, "unsupported", reason)
                continue
            prepared = variant.prepare(case, device, 0)
            clock.lap("prepare_s")
            for _ in range(WARMUP_CALLS):
                prepared.fn()
            torch.cuda.synchronize()
            clock.lap("warmup_s")
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(case.id)
            prepared.fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            clock.lap("profiled_s")  # ncu's replay passes of the call's kernels happen here
            outcome: tuple[str, str | None] = ("ok", None)
        except Exception as exc:  # one case's failure must not cost the others
            outcome = ("failed", f"{type(exc).__name__}: {exc}")
        finally:
            del prepared
            if torch.cuda.memory_allocated() > allocated:
                gc.collect()  # something (a reference cycle, a library's workspace) still holds blocks
            clock.lap("gc_s")
            torch.cuda.empty_cache()
        clock.lap("free_s")
        _report(case.id, *outcome, phases=clock.phases)
    return 0


class _PhaseClock:
    """Seconds of each stage of one case in the target, so a profile's cost per case can be
    split between the harness (prepare, warm-up, garbage collection, freeing) and ncu's replay
    (profiled)."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = now - self._last
        self._last = now


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
