"""A stand-in for the `pynvml` module (nvidia-ml-py): a host's GPUs as plain data.

Implements the NVML calls attnwatch makes, with NVML's own behaviour where it matters: indices
in PCI bus order, handles by index, UUID or PCI bus id, MIG slices under a GPU in MIG mode,
NVMLError for anything unknown. Each GPU has its own clocks and throttle mask, so a test can
tell which GPU a reading came from. Install with `monkeypatch.setitem(sys.modules, "pynvml", fake)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    pci_bus_id: str  # as NVML prints it: 00000000:19:00.0
    name: str = "NVIDIA H200"
    sm_clock_mhz: int = 1980
    sm_clock_max_mhz: int = 1980
    reasons_mask: int = 0
    power_mw: int = 450_000
    power_limit_mw: int = 700_000
    migs: list[tuple[str, str]] = field(default_factory=list)  # (MIG uuid, name); non-empty = MIG mode on


class FakeNvml:
    NVMLError = NVMLError
    NVML_CLOCK_SM = 1
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: list[FakeGpu], driver: str = "580.65.06", cuda: int = 13000) -> None:
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.initialised = 0

    def _gpu(self, handle) -> FakeGpu:
        kind, index, *_ = handle
        if kind != "gpu":
            raise NVMLError("not supported on a MIG device handle")
        return self.gpus[index]

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        if not 0 <= index < len(self.gpus):
            raise NVMLError(f"invalid index {index}")
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return ("gpu", i)
            for j, (mig_uuid, _) in enumerate(gpu.migs):
                if mig_uuid == uuid:
                    return ("mig", i, j)
        raise NVMLError(f"no device {uuid}")

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str):
        for i, gpu in enumerate(self.gpus):
            if gpu.pci_bus_id == bus_id:
                return ("gpu", i)
        raise NVMLError(f"no device at {bus_id}")

    def nvmlDeviceGetUUID(self, handle) -> str:
        if handle[0] == "mig":
            return self.gpus[handle[1]].migs[handle[2]][0]
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle) -> str:
        if handle[0] == "mig":
            return self.gpus[handle[1]].migs[handle[2]][1]
        return self._gpu(handle).name

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._gpu(handle).pci_bus_id.encode())

    def nvmlDeviceGetClockInfo(self, handle, clock: int) -> int:
        return self._gpu(handle).sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle, clock: int) -> int:
        return self._gpu(handle).sm_clock_max_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        return self._gpu(handle).reasons_mask

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        return self._gpu(handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle) -> int:
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetMigMode(self, handle) -> list[int]:
        on = 1 if self._gpu(handle).migs else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot: int):
        gpu = self._gpu(handle)
        if slot >= len(gpu.migs):
            raise NVMLError("not found")
        return ("mig", handle[1], slot)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda


def two_h200s() -> FakeNvml:
    """A 2-GPU H200 host: GPU 1 runs at a lower clock and is power-capped, so readings tell them apart."""
    return FakeNvml(
        [
            FakeGpu("GPU-0a0a0a0a-1111-2222-3333-444444444444", "00000000:19:00.0", sm_clock_mhz=1980),
            FakeGpu(
                "GPU-1b1b1b1b-5555-6666-7777-888888888888", "00000000:3B:00.0", sm_clock_mhz=1755, reasons_mask=0x4
            ),
        ]
    )
