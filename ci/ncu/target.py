"""The program ncu profiles: prepare each case, warm it up, then run it once inside its NVTX range.

Run as `python -m ci.ncu.target PLAN.json`, one process for every case of the plan (torch is
imported once; each variant's build comes from the compile cache). A plan's `stop_at` (epoch
seconds) is when no further case starts, so the profiler still writes its report before the
run's deadline; later cases are reported with status "deadline". Profiling is off at start
(`ncu --profile-from-start off`); compilation, autotuning and warm-up happen outside it, and
only the one call per case between `cudaProfilerStart` and `cudaProfilerStop` is measured,
attributed to the case by an NVTX range named with the case id: ncu replays exactly the
kernels of that one call. After each case its tensors are freed and torch's cached blocks given
back (`empty_cache`), so the device memory ncu may save and restore around a multi-pass kernel
holds no earlier case's blocks. Each case's outcome is printed as one line
starting with `attnwatch-ncu:` so the parent can tell a case that could not run from one ncu
did not see.
"""

from __future__ import annotations

import gc
import json
import sys
import time

from attnwatch.ci.kernels_api import kernels_api

OUTCOME_PREFIX = "attnwatch-ncu:"
WARMUP_CALLS = 3


def _report(case_id: str, status: str, error: str | None = None) -> None:
    print(OUTCOME_PREFIX + json.dumps({"case_id": case_id, "status": status, "error": error}), flush=True)


def main(argv: list[str]) -> int:
    import torch

    plan = json.loads(open(argv[0], encoding="utf-8").read())
    stop_at = plan.get("stop_at")
    device = torch.device("cuda")
    if torch.cuda.is_available():
        torch.empty(1, device=device)  # the context (and ncu's set-up of it) before the first case's clock starts
    api = kernels_api()  # the profiled checkout's kernels (compare profiles the base's too)
    for entry in plan["cases"]:
        case = api.Case(entry["variant"], api.Shape(**entry["shape"]), entry["dtype"], bool(entry["causal"]))
        if stop_at is not None and time.time() >= stop_at:
            _report(case.id, "deadline", "not started: the run's deadline is near")
            continue
        prepared = None
        try:
            variant = api.get(case.variant)
            reason = variant.unsupported(case)
            if reason:
                _report(case.id, "unsupported", reason)
                continue
            prepared = variant.prepare(case, device, 0)
            for _ in range(WARMUP_CALLS):
                prepared.fn()
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(case.id)
            prepared.fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            _report(case.id, "ok")
        except Exception as exc:  # one case's failure must not cost the others
            _report(case.id, "failed", f"{type(exc).__name__}: {exc}")
        finally:
            del prepared
            gc.collect()
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
