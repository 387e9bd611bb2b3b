"""Which GPU a run uses: CUDA_VISIBLE_DEVICES mapped onto NVML's device list (pure functions),
and the environment capture, the clock monitor and the bundle merge that depend on it, on a
fake 2-GPU host (tests/fake_nvml.py)."""

from __future__ import annotations

import sys

import pytest

from attnwatch.ci.environment import capture_environment, declared_pool, merge_device_properties, nvml_gpu
from attnwatch.ci.errors import UserError
from attnwatch.ci.gpu_identity import (
    GpuIdentity,
    MigDevice,
    NvmlDevice,
    canonical_pci,
    match_device,
    parse_visible_devices,
    pci_from_parts,
    visible_gpu,
    visible_gpus,
)
from attnwatch.ci.timing.gpu_state import NullMonitor, NvmlMonitor, open_monitor
from fake_nvml import FakeGpu, FakeNvml, two_h200s

UUID0 = "GPU-0a0a0a0a-1111-2222-3333-444444444444"
UUID1 = "GPU-1b1b1b1b-5555-6666-7777-888888888888"
MIG = "MIG-9c9c9c9c-aaaa-bbbb-cccc-dddddddddddd"
# NVML lists GPUs in PCI bus order; the list is given shuffled to show nothing relies on list order.
DEVICES = [
    NvmlDevice(1, UUID1, "00000000:3B:00.0", "NVIDIA H200"),
    NvmlDevice(0, UUID0, "00000000:19:00.0", "NVIDIA H200"),
]
MIG_DEVICES = [
    NvmlDevice(
        0, UUID0, "00000000:19:00.0", "NVIDIA H100 80GB HBM3", (MigDevice(MIG, "NVIDIA H100 80GB HBM3 MIG 1g.10gb"),)
    ),
]


def by_index(i: int) -> GpuIdentity:
    d = next(d for d in DEVICES if d.index == i)
    return GpuIdentity(d.index, d.uuid, d.pci_bus_id, d.name)


# --- parsing CUDA_VISIBLE_DEVICES ------------------------------------------------------------


@pytest.mark.parametrize(
    "value,tokens",
    [
        (None, None),  # unset: every device
        ("", []),  # empty: no device
        ("1", [1]),
        ("1,0", [1, 0]),
        (" 1 , 0 ", [1, 0]),
        ("0,-1,1", [0]),  # a negative ordinal ends the list
        ("1gpu,2", [1, 2]),  # strtoul: leading digits count
        ("0,x,1", [0]),  # not a number: ends the list
        ("0,0", []),  # a repeated device: nothing visible
        (f"{UUID1},{UUID0}", [UUID1, UUID0]),
        ("GPU-1b1b,3", ["GPU-1b1b"]),  # the first token sets the kind; another kind ends the list
        (MIG, [MIG]),
    ],
)
def test_parse_visible_devices_follows_cuda(value, tokens):
    assert parse_visible_devices(value) == tokens


# --- mapping onto NVML's devices --------------------------------------------------------------


def test_ordinals_map_onto_nvml_devices_in_pci_order():
    assert visible_gpus(None, DEVICES) == [by_index(0), by_index(1)]
    assert visible_gpu("1", DEVICES) == by_index(1)
    assert visible_gpu("1,0", DEVICES, ordinal=1) == by_index(0)


def test_uuids_and_unique_prefixes_name_their_gpu():
    assert visible_gpu(UUID1, DEVICES) == by_index(1)
    assert visible_gpu("GPU-0a0a", DEVICES) == by_index(0)
    assert visible_gpus("GPU-", DEVICES) == []  # ambiguous prefix: ends the list, as in CUDA


def test_an_unknown_device_ends_the_list_and_a_repeat_empties_it():
    assert visible_gpus("1,5,0", DEVICES) == [by_index(1)]
    assert visible_gpus(f"1,{UUID1}", DEVICES) == [by_index(1)]  # a UUID after an ordinal is another kind
    assert visible_gpus(f"{UUID1},GPU-1b1b", DEVICES) == []  # both name GPU 1
    assert visible_gpu("", DEVICES) is None
    assert visible_gpu("0", DEVICES, ordinal=1) is None


def test_mig_ids_name_the_slice_and_its_physical_gpu():
    gpu = visible_gpu(MIG, MIG_DEVICES)
    assert (gpu.uuid, gpu.pci_bus_id, gpu.nvml_index, gpu.mig_uuid) == (UUID0, "00000000:19:00.0", 0, MIG)
    assert gpu.name.endswith("MIG 1g.10gb")  # a slice measures like a slice: its name keys the series
    legacy = visible_gpu(f"MIG-{UUID0}/1/0", MIG_DEVICES)
    assert (legacy.uuid, legacy.mig_uuid) == (UUID0, f"MIG-{UUID0}/1/0")


def test_torch_identity_matches_by_uuid_then_pci():
    # torch prints the UUID without NVML's prefix, and reports PCI domain, bus and device numbers.
    assert match_device(DEVICES, uuid=UUID1.removeprefix("GPU-")) == by_index(1)
    assert match_device(MIG_DEVICES, uuid=MIG.removeprefix("MIG-")).mig_uuid == MIG
    assert match_device(DEVICES, pci_bus_id=pci_from_parts(0, 0x3B, 0)) == by_index(1)
    assert match_device(DEVICES, uuid="ffffffff-0000-0000-0000-000000000000") is None


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("00000000:3B:00.0", "00000000:3B:00.0"),
        ("0000:3b:00.0", "00000000:3B:00.0"),  # sysfs / lspci
        ("3b:00.0", "00000000:3B:00.0"),
        ("not a bus id", None),
        (None, None),
    ],
)
def test_pci_bus_ids_are_canonical(text, canonical):
    assert canonical_pci(text) == canonical


# --- the environment, the clock monitor and the bundle merge, on a fake host -----------------


@pytest.fixture
def host(monkeypatch):
    fake = two_h200s()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("ATTNWATCH_POOL", raising=False)
    return fake


def test_a_runner_pinned_to_gpu_1_records_gpu_1(host, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    env = capture_environment(probe_device=False)
    assert (env.gpu_uuid, env.gpu_pci_bus_id, env.gpu_index) == (UUID1, "00000000:3B:00.0", 1)
    assert env.sm_clock_mhz == 1755  # GPU 1's clock, not GPU 0's
    assert env.gpu_count == 2 and env.device_kind == "cuda"
    assert host.initialised == 0  # NVML shut down again


def test_unpinned_and_uuid_pinned_runners(host, monkeypatch):
    assert nvml_gpu().uuid == UUID0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUID1)
    assert nvml_gpu().uuid == UUID1
    assert nvml_gpu(uuid=UUID0.removeprefix("GPU-")).uuid == UUID0  # torch's answer wins over the variable


def test_hidden_gpus_make_a_cpu_environment(host, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    env = capture_environment(probe_device=False)
    assert env.device_kind == "cpu" and env.gpu_uuid is None and env.gpu_index is None


def test_the_clock_monitor_reads_the_gpu_in_use(host, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monitor = open_monitor("cuda")
    assert monitor.identity.uuid == UUID1
    assert monitor.sm_clock_mhz() == 1755 and monitor.reasons() == ["sw_power_cap"]
    by_torch = NvmlMonitor(uuid=UUID0.removeprefix("GPU-"))  # the measuring child passes torch's UUID
    assert by_torch.sm_clock_mhz() == 1980 and by_torch.reasons() == []
    assert isinstance(open_monitor("cuda", uuid="ffffffff-0000-0000-0000-000000000000"), NullMonitor)


def test_the_childs_gpu_replaces_a_wrong_guess_of_the_parent(host):
    parent = capture_environment(probe_device=False)  # unpinned: guesses GPU 0
    child = {
        "gpu_name": "NVIDIA H200",
        "gpu_uuid": UUID1,
        "gpu_pci_bus_id": "00000000:3B:00.0",
        "gpu_index": 1,
        "gpu_mig_uuid": None,
        "sm_clock_mhz": 1755,
        "sm_clock_max_mhz": 1980,
        "sm_count": 132,
    }
    env = merge_device_properties(parent, child)
    assert (env.gpu_uuid, env.gpu_index, env.sm_clock_mhz, env.sm_count) == (UUID1, 1, 1755, 132)


def test_a_mig_slice_on_a_fake_host(monkeypatch):
    fake = FakeNvml(
        [
            FakeGpu(
                UUID0,
                "00000000:19:00.0",
                name="NVIDIA H100 80GB HBM3",
                migs=[(MIG, "NVIDIA H100 80GB HBM3 MIG 1g.10gb")],
            )
        ]
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG)
    gpu = nvml_gpu()
    assert (gpu.uuid, gpu.mig_uuid, gpu.name) == (UUID0, MIG, "NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    assert gpu.sm_clock_mhz == 1980  # clocks read from the physical GPU


def test_declared_pool(monkeypatch):
    monkeypatch.setenv("ATTNWATCH_POOL", "h200-sxm-rack2")
    assert declared_pool() == "h200-sxm-rack2"
    monkeypatch.setenv("ATTNWATCH_POOL", "  ")
    assert declared_pool() is None
    monkeypatch.setenv("ATTNWATCH_POOL", "rack 2; drop table")
    with pytest.raises(UserError, match="ATTNWATCH_POOL"):
        declared_pool()
