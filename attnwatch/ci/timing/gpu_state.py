"""SM clock, throttle reasons and power through NVML, read around every case and after every block.

Bits are NVML's `nvmlClocksEventReasons` values (nvml.h). Only the reasons that lower the
clock under load count as throttling (HW slowdown, thermal, power brake, power cap); idle,
application-clock and sync-boost bits are recorded by name but do not flag samples.
"""

from __future__ import annotations

import os
from typing import Any

from attnwatch.ci.gpu_identity import find_gpu, open_handle

REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)


def decode_reasons(mask: int) -> list[str]:
    """Names of the bits set in an NVML clocks-event-reasons mask, in bit order."""
    return [name for bit, name in sorted(REASON_BITS.items()) if mask & bit]


def is_throttling(reasons: list[str]) -> bool:
    return any(r in THROTTLING for r in reasons)


class NullMonitor:
    """No GPU or no NVML: every reading is None / empty."""

    available = False

    def sm_clock_mhz(self) -> int | None:
        return None

    def reasons(self) -> list[str]:
        return []

    def max_sm_clock_mhz(self) -> int | None:
        return None

    def power_w(self) -> float | None:
        return None

    def power_limit_w(self) -> float | None:
        return None


class NvmlMonitor:
    """Reads one GPU's SM clock and current clocks-event reasons (cheap: a few microseconds).

    The GPU is the one the process measures on (ci.gpu_identity.find_gpu): given torch's
    `uuid` / `pci_bus_id`, that device; otherwise CUDA device `ordinal` under
    CUDA_VISIBLE_DEVICES. `identity` says which GPU the readings come from.
    """

    available = True

    def __init__(self, ordinal: int = 0, *, uuid: str | None = None, pci_bus_id: str | None = None) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        identity = find_gpu(
            pynvml, visible=os.environ.get("CUDA_VISIBLE_DEVICES"), ordinal=ordinal, uuid=uuid, pci_bus_id=pci_bus_id
        )
        if identity is None:
            pynvml.nvmlShutdown()
            raise LookupError(
                f"NVML lists no GPU for CUDA device {ordinal} "
                f"(uuid {uuid}, pci {pci_bus_id}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
            )
        self.identity = identity
        self._handle = open_handle(pynvml, identity)
        # Renamed from "ClocksThrottleReasons" in newer NVML; both return the same mask.
        self._reasons_fn = (
            getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )

    def sm_clock_mhz(self) -> int | None:
        return int(self._nvml.nvmlDeviceGetClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def reasons(self) -> list[str]:
        return decode_reasons(int(self._reasons_fn(self._handle)))

    def max_sm_clock_mhz(self) -> int | None:
        return int(self._nvml.nvmlDeviceGetMaxClockInfo(self._handle, self._nvml.NVML_CLOCK_SM))

    def power_w(self) -> float | None:
        """Board power draw (NVML's nvmlDeviceGetPowerUsage, milliwatts; a running average on
        recent GPUs): what power pacing sizes its gap from."""
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0

    def power_limit_w(self) -> float | None:
        """The power limit the driver enforces now (the cap `sw_power_cap` reports hitting)."""
        return self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000.0


def open_monitor(device_kind: str, ordinal: int = 0, *, uuid: str | None = None, pci_bus_id: str | None = None) -> Any:
    """An NvmlMonitor of the GPU in use on a CUDA machine with nvidia-ml-py installed, else a
    NullMonitor (also when NVML cannot find that GPU: no reading beats another GPU's)."""
    if device_kind != "cuda":
        return NullMonitor()
    try:
        import pynvml  # noqa: F401 - only: is nvidia-ml-py installed
    except ImportError:
        return NullMonitor()
    try:
        return NvmlMonitor(ordinal, uuid=uuid, pci_bus_id=pci_bus_id)
    except LookupError:
        return NullMonitor()
