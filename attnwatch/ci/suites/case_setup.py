"""The stages every measuring process runs for a case before timing it, in one place.

Used by the measuring engine (ci/engine/group.py), which the pytest child of `attnwatch run`
and the long-lived compare workers both run, so both resolve, check and prepare a case alike:

* `resolve`: the variant from this process's registry, its availability, whether it supports
  the case, and whether its build failed;
* `check`: correctness on fresh inputs per seed (kernels.correctness), as bundle records;
* `prepare_rotation`: one callable over `input_set_count` independently allocated input sets;
* `device_sync`: wait for the device and surface any asynchronous error now.

Why `device_sync` after every stage: a CUDA kernel that faults (an illegal address) reports
it asynchronously, at the next call that synchronizes, which may belong to the next case.
Synchronizing at the end of each stage of each case makes the error surface inside the stage
that issued the work, so the stage's case is the one charged with it (see ci/attribution.py
for what happens when an error still surfaces elsewhere). On a CPU, `torch.cpu.synchronize`
is called, a no-op that the test suite's fault variants use to simulate an asynchronous fault.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from attnwatch.ci.kernels_api import kernels_api
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import TimingConfig
from attnwatch.ci.timing.derived import KernelRan

# Texts that identify an error after which the CUDA context is unusable (sticky errors).
_POISON_MARKERS = (
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "illegal instruction",
    "CUDA_ERROR_",
    "cudaErrorIllegal",
    "cudaErrorLaunchFailure",
    "AcceleratorError",
    "CUDA error",
)


def is_poisoning(exc: BaseException) -> bool:
    """True when `exc` is a CUDA error that leaves the context unusable (not out-of-memory)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return False
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _POISON_MARKERS)


def variant_availability(variant: Any) -> tuple[bool, str]:
    """kernels' own decision (kernels.availability), made once per process."""
    return kernels_api().availability(variant)


class CaseSetup:
    """Per-process: the plan, the device and the stage functions (no timing, no journal)."""

    def __init__(self, plan: RunPlan, device: Any, config: TimingConfig) -> None:
        self.plan = plan
        self.device = device
        self.config = config
        self.build_failures: dict[str, str] = {}
        # case id -> what its latest prepare reported it runs (kernels.variant.Prepared)
        self.kernels_ran: dict[str, KernelRan] = {}

    def device_sync(self) -> None:
        """Wait for all work on the device; raises the device's pending asynchronous error."""
        import torch

        if self.plan.device_kind == "cuda":
            torch.cuda.synchronize()
        else:
            torch.cpu.synchronize()

    def resolve(self, case: PlannedCase) -> tuple[Any, tuple[str, str] | None]:
        """((variant, kernels Case), None) when the case can run, else (None, (status, reason))."""
        api = kernels_api()
        try:
            variant = api.get(case.variant)
        except KeyError as exc:
            return None, ("skipped", f"variant not in this checkout's registry: {exc}")
        ok, reason = variant_availability(variant)
        if not ok:
            return None, ("skipped", reason or "unavailable")
        kcase = case.to_case()
        reason = variant.unsupported(kcase)
        if reason:
            return None, ("unsupported", reason)
        if case.variant in self.build_failures:
            return None, ("failed", f"build failed: {self.build_failures[case.variant]}")
        return (variant, kcase), None

    def check(self, case: PlannedCase, variant: Any, kcase: Any) -> list[dict[str, Any]]:
        """Correctness on fresh inputs per seed (kernels.correctness), as the bundle's records
        (ci.records converts every field)."""
        from attnwatch.ci.records import correctness_record

        results = kernels_api().check_case(variant, kcase, self.device, list(self.plan.correctness_seeds))
        return [asdict(correctness_record(case, r)) for r in results]

    def input_set_count(self, case: PlannedCase) -> int:
        """How many input sets to rotate over: `input_sets` when they all fit the byte cap."""
        per_set = case.bytes  # the operator's byte model: every input and output once
        sets = self.config.input_sets
        return sets if sets > 1 and sets * per_set <= self.config.input_sets_max_bytes else 1

    def prepare_rotation(self, variant: Any, kcase: Any, case: PlannedCase, seed: int) -> Any:
        """One callable over `input_set_count` prepared input sets (seeds seed + j).

        Successive calls use successive sets, so the per-call samples (and the median) average
        over several independent allocations instead of inheriting one allocation's placement.
        """
        count = self.input_set_count(case)
        prepared = [variant.prepare(kcase, self.device, seed + j) for j in range(count)]
        self.kernels_ran[case.case_id] = KernelRan.of(prepared[0])
        fns = [p.fn for p in prepared]
        if count == 1:
            return fns[0]
        state = {"i": 0}

        def rotating() -> Any:
            i = state["i"]
            state["i"] = (i + 1) % count
            return fns[i]()

        return rotating


def open_device(device_kind: str, config: TimingConfig) -> tuple[Any, Any, Any]:
    """(device, L2 flusher, block timer) for the device kind ("cuda" or "cpu": a plan's, or the
    pytest plugin's); refuses a silent CPU fallback."""
    import torch

    from attnwatch.ci.timing.timers import CpuWallTimer, CudaEventTimer, L2Flusher, NoFlush

    if device_kind not in ("cuda", "cpu"):
        # Anything else (a namespace, a torch.device) would fall through to the host timer and
        # time a GPU call's launch instead of the call.
        raise ValueError(f"device kind must be 'cuda' or 'cpu', not {device_kind!r}")
    if device_kind == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("the plan asks for a CUDA run but this process sees no CUDA device")
        device = torch.device("cuda", torch.cuda.current_device())
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        return (
            device,
            L2Flusher(device, int(config.flush_l2_multiple * l2)),
            CudaEventTimer(config.block_calls, streams=config.streams),
        )
    # One intra-op thread: on a shared CI CPU a thread pool's scheduling stalls (tens of ms)
    # swamp a sub-millisecond call; one thread keeps cpu_wall honest.
    torch.set_num_threads(1)
    return torch.device("cpu"), NoFlush(), CpuWallTimer()


def device_monitor(device_kind: str, device: Any) -> Any:
    """Clocks and throttle reasons of the GPU these kernels run on, found by torch's UUID."""
    from attnwatch.ci.timing.gpu_state import open_monitor

    if device.type != "cuda":
        return open_monitor(device_kind)
    from attnwatch.ci.environment import torch_device_identity

    return open_monitor(device_kind, device.index or 0, **torch_device_identity(device.index or 0))
