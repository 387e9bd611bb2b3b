"""Which physical GPU a run uses, as NVML names it: the device behind CUDA_VISIBLE_DEVICES.

NVML numbers every GPU of the host (index order = PCI bus order) and knows nothing of
CUDA_VISIBLE_DEVICES; CUDA numbers only the visible devices, in the order that variable lists
them. Reading NVML's device 0 therefore reports another GPU's UUID, clocks and throttle reasons
whenever a runner is pinned to GPU 1. This module maps one to the other.

Pure part (no NVML, no torch; tested with plain lists):
  * `parse_visible_devices(value)`: the tokens CUDA will honour, with CUDA's rules as torch
    mirrors them (`torch.cuda._parse_visible_devices`): unset = every device; the kind of the
    list (ordinals, `GPU-` UUIDs, `MIG-` ids) is set by its first token; a token of another
    kind, a negative ordinal or an unknown/ambiguous UUID ends the list there; an ordinal is
    read like C's strtoul (leading digits: `1gpu` is 1); a repeated device makes the list empty.
  * `visible_gpus(value, devices)`: the visible devices, in CUDA's order, as `GpuIdentity`.
  * `match_device(devices, uuid=..., pci_bus_id=...)`: the NVML device that torch reports for
    its current device (`get_device_properties(i).uuid` / PCI domain, bus and device numbers).
Ordinals map onto NVML devices sorted by PCI bus id: that is CUDA's order under
CUDA_DEVICE_ORDER=PCI_BUS_ID, and under the default FASTEST_FIRST whenever the GPUs are of one
model. On a host mixing models the measuring child's answer (by UUID, from torch) is the one
recorded: see ci/environment.py.

NVML part (`nvml_devices`, `open_handle`): reads the device list through a `pynvml` module
passed in, so tests hand in a fake one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

_PCI = re.compile(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])$")
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance of a GPU: NVML's `MIG-...` UUID and its name (which names the slice)."""

    uuid: str
    name: str


@dataclass(frozen=True)
class NvmlDevice:
    """A physical GPU as NVML lists it: `index` is NVML's, `pci_bus_id` canonical (see canonical_pci)."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    migs: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class GpuIdentity:
    """The device a run uses. `uuid`, `pci_bus_id` and `nvml_index` are the physical GPU's (clocks
    and throttle reasons are per physical GPU); on a MIG slice `mig_uuid` names the slice and
    `name` is the slice's name (e.g. "NVIDIA H100 80GB HBM3 MIG 1g.10gb")."""

    nvml_index: int
    uuid: str
    pci_bus_id: str
    name: str
    mig_uuid: str | None = None


def canonical_pci(text: str | None) -> str | None:
    """A PCI bus id as NVML prints it, "00000000:19:00.0" (8-digit domain, upper-case hex);
    None when `text` is not one. Accepts the 4-digit-domain form of sysfs and lspci too."""
    if not text:
        return None
    match = _PCI.match(text.strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{function}"


def pci_from_parts(domain: int, bus: int, device: int, function: int = 0) -> str:
    """Canonical bus id from the numbers CUDA reports (cudaDeviceProp pciDomainID/BusID/DeviceID)."""
    return f"{int(domain):08X}:{int(bus):02X}:{int(device):02X}.{int(function)}"


def _strtoul(token: str) -> int:
    """Leading decimal digits of `token` (after blanks and an optional sign), as C's strtoul
    reads CUDA_VISIBLE_DEVICES entries; -1 when there are none or the value is negative."""
    match = re.match(r"\s*([+-]?)(\d+)", token)
    if not match:
        return -1
    value = int(match.group(2))
    return -value if match.group(1) == "-" else value


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """The device tokens CUDA honours in CUDA_VISIBLE_DEVICES (module docstring); None = unset."""
    if value is None:
        return None
    tokens = [t.strip() for t in value.split(",")]
    first = tokens[0] if tokens else ""
    if first.startswith(("GPU-", "MIG-")):
        prefix = first[:4]
        kept: list[str] = []
        for token in tokens:
            if not token.startswith(prefix):
                break
            if token in kept:
                return []
            kept.append(token)
        return kept
    ordinals: list[int] = []
    for token in tokens:
        number = _strtoul(token)
        if number < 0:
            break
        if number in ordinals:
            return []
        ordinals.append(number)
    return ordinals


def _identity(device: NvmlDevice, mig: MigDevice | None = None) -> GpuIdentity:
    return GpuIdentity(
        device.index, device.uuid, device.pci_bus_id, mig.name if mig else device.name, mig.uuid if mig else None
    )


def _unique_prefix(candidates: list[tuple[str, Any]], token: str) -> Any | None:
    """The one candidate whose key starts with `token` (CUDA accepts unique UUID prefixes)."""
    hits = [value for key, value in candidates if key.lower().startswith(token.lower())]
    return hits[0] if len(hits) == 1 else None


def _resolve_token(token: int | str, devices: Sequence[NvmlDevice]) -> GpuIdentity | None:
    by_pci = sorted(devices, key=lambda d: d.pci_bus_id)
    if isinstance(token, int):
        return _identity(by_pci[token]) if token < len(by_pci) else None
    if token.startswith("GPU-"):
        device = _unique_prefix([(d.uuid, d) for d in devices], token)
        return _identity(device) if device else None
    legacy = _LEGACY_MIG.match(token)
    if legacy:  # MIG-GPU-<uuid>/<gi>/<ci> (drivers before R470): the GPU is known, the slice by its ids only
        device = _unique_prefix([(d.uuid, d) for d in devices], legacy.group(1))
        return GpuIdentity(device.index, device.uuid, device.pci_bus_id, device.name, token) if device else None
    found = _unique_prefix([(m.uuid, (d, m)) for d in devices for m in d.migs], token)
    return _identity(*found) if found else None


def visible_gpus(value: str | None, devices: Sequence[NvmlDevice]) -> list[GpuIdentity]:
    """The devices CUDA exposes for CUDA_VISIBLE_DEVICES=`value`, in CUDA's order.

    Unset: every NVML device by PCI bus order. A token that names no device ends the list there
    (CUDA's rule); two tokens naming the same device make it empty.
    """
    tokens = parse_visible_devices(value)
    if tokens is None:
        return [_identity(d) for d in sorted(devices, key=lambda d: d.pci_bus_id)]
    found: list[GpuIdentity] = []
    for token in tokens:
        identity = _resolve_token(token, devices)
        if identity is None:
            break
        if identity in found:
            return []
        found.append(identity)
    return found


def visible_gpu(value: str | None, devices: Sequence[NvmlDevice], ordinal: int = 0) -> GpuIdentity | None:
    """CUDA device `ordinal` (torch's `cuda:<ordinal>`) under CUDA_VISIBLE_DEVICES=`value`; None if hidden."""
    gpus = visible_gpus(value, devices)
    return gpus[ordinal] if 0 <= ordinal < len(gpus) else None


def match_device(
    devices: Sequence[NvmlDevice], uuid: str | None = None, pci_bus_id: str | None = None
) -> GpuIdentity | None:
    """The NVML device torch reports: by UUID (torch prints it without NVML's `GPU-`/`MIG-`
    prefix), else by PCI bus id; None when neither matches."""
    if uuid:
        bare = uuid.lower().removeprefix("gpu-").removeprefix("mig-")
        for device in devices:
            if device.uuid.lower().removeprefix("gpu-") == bare:
                return _identity(device)
            for mig in device.migs:
                if mig.uuid.lower().removeprefix("mig-") == bare:
                    return _identity(device, mig)
    wanted = canonical_pci(pci_bus_id)
    if wanted:
        for device in devices:
            if device.pci_bus_id == wanted:
                return _identity(device)
    return None


# --- NVML ------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _migs(nvml: Any, handle: Any) -> tuple[MigDevice, ...]:
    """The MIG instances of a GPU in MIG mode; () when MIG is off or unsupported."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return ()
        slots = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except (nvml.NVMLError, AttributeError):
        return ()
    found = []
    for slot in range(slots):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:
            continue  # an empty slot
        found.append(MigDevice(_text(nvml.nvmlDeviceGetUUID(mig)), _text(nvml.nvmlDeviceGetName(mig))))
    return tuple(found)


def nvml_devices(nvml: Any) -> list[NvmlDevice]:
    """Every physical GPU NVML sees (nvmlInit already called on `nvml`)."""
    devices = []
    for index in range(int(nvml.nvmlDeviceGetCount())):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        pci = canonical_pci(_text(nvml.nvmlDeviceGetPciInfo(handle).busId)) or ""
        devices.append(
            NvmlDevice(
                index,
                _text(nvml.nvmlDeviceGetUUID(handle)),
                pci,
                _text(nvml.nvmlDeviceGetName(handle)),
                _migs(nvml, handle),
            )
        )
    return devices


def open_handle(nvml: Any, identity: GpuIdentity) -> Any:
    """NVML's handle of the identity's physical GPU: by UUID, else by PCI bus id."""
    try:
        return nvml.nvmlDeviceGetHandleByUUID(identity.uuid)
    except nvml.NVMLError:
        return nvml.nvmlDeviceGetHandleByPciBusId(identity.pci_bus_id)


def find_gpu(
    nvml: Any, *, visible: str | None, ordinal: int = 0, uuid: str | None = None, pci_bus_id: str | None = None
) -> GpuIdentity | None:
    """The GPU a process uses. With torch's `uuid`/`pci_bus_id` of its device (the measuring
    child knows them): that device, or None if NVML does not list it (never a guess). Without
    (a parent that must not create a CUDA context): CUDA device `ordinal` under
    CUDA_VISIBLE_DEVICES=`visible`."""
    devices = nvml_devices(nvml)
    if uuid or pci_bus_id:
        return match_device(devices, uuid=uuid, pci_bus_id=pci_bus_id)
    return visible_gpu(visible, devices, ordinal)
