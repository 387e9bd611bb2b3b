"""fa4_sm90 (kernels/variants/fa4_cute.py) without a GPU: its registry entry and declared limits,
its availability and reason (the package missing, the package found in an ATTNWATCH_EXTRA_SITE
folder through its .pth file, no Hopper GPU), and the launch recording that keeps the interface's
compile and Python out of the timed call, on a stand-in interface module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from attnwatch.kernels.availability import availability, capabilities
from attnwatch.kernels.cases import Case
from attnwatch.kernels.record_paths import absolute_paths
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.registry import get
from attnwatch.kernels.shapes import SHAPES, adhoc_shape
from attnwatch.kernels.variants.fa4_cute import record_launch

ROOT = Path(__file__).resolve().parent.parent


def _case(shape=SHAPES["b4_h16_s1k"], dtype="fp16", causal=False) -> Case:
    return Case("fa4_sm90", shape, dtype, causal)


def test_registered_as_a_hopper_flash_attn_variant_with_its_limits():
    variant = get("fa4_sm90")
    assert variant.family == "flash_attn" and variant.operator == "attention"
    assert "fa4_sm90" in get_operator("attention").references  # a reference, not the baseline
    assert variant.needs == {"cuda", "hopper", "flash_attn_cute"}
    for dtype in ("fp16", "bf16"):
        for causal in (False, True):
            assert variant.unsupported(_case(dtype=dtype, causal=causal)) is None
    assert variant.unsupported(_case(SHAPES["b4_h16_s1k_d128"])) is None
    assert "fp16 and bf16 only" in variant.unsupported(_case(dtype="fp32"))
    assert "multiples of 8" in variant.unsupported(_case(adhoc_shape(1, 2, 64, 36)))
    assert "8..256" in variant.unsupported(_case(adhoc_shape(1, 2, 64, 512)))


def _availability_in_child(env_extra: dict[str, str]) -> tuple[bool, str]:
    """fa4_sm90's (ok, reason) probed in a fresh interpreter (sys.path and the probe's cache clean)."""
    env = {name: value for name, value in os.environ.items() if name != "ATTNWATCH_EXTRA_SITE"}
    env.update({"PYTHONPATH": str(ROOT), **env_extra})
    code = "import json; from attnwatch.kernels.availability import availability; print(json.dumps(availability('fa4_sm90')))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ok, reason = json.loads(done.stdout)
    return ok, reason


@pytest.fixture
def fake_fa4_site(tmp_path) -> Path:
    """A pip --target folder shaped like flash-attn-4's: `flash_attn.cute` imports a package that
    only a .pth file of the folder puts on the path (as nvidia-cutlass-dsl's does for `cutlass`)."""
    site_dir = tmp_path / "fa4site"
    (site_dir / "flash_attn" / "cute").mkdir(parents=True)
    (site_dir / "flash_attn" / "__init__.py").write_text("")
    (site_dir / "flash_attn" / "cute" / "__init__.py").write_text("import fake_cutlass_dsl\n")
    (site_dir / "dsl_packages" / "fake_cutlass_dsl").mkdir(parents=True)
    (site_dir / "dsl_packages" / "fake_cutlass_dsl" / "__init__.py").write_text("")
    (site_dir / "fake_dsl_packages.pth").write_text("dsl_packages\n")
    return site_dir


@pytest.mark.skipif(capabilities().cuda, reason="needs a machine without a CUDA device")
def test_package_in_an_extra_site_folder_imports_and_the_reason_is_the_missing_hopper_gpu(fake_fa4_site):
    ok, reason = _availability_in_child({"ATTNWATCH_EXTRA_SITE": str(fake_fa4_site)})
    assert not ok and reason.startswith("needs a Hopper GPU (cc 9.x): ")
    assert "flash" not in reason and "CUDA device" not in reason
    # The same folder as a plain path entry: its .pth is not run, the import fails, and the
    # reason says so with no machine path in it.
    ok, reason = _availability_in_child({"PYTHONPATH": os.pathsep.join([str(ROOT), str(fake_fa4_site)])})
    assert (
        not ok
        and "needs flash-attn-4: flash_attn.cute is not importable (ModuleNotFoundError: No module named "
        "'fake_cutlass_dsl')"
        in reason
        and "ATTNWATCH_EXTRA_SITE" in reason
    )
    assert absolute_paths(reason) == []


def test_unavailable_here_with_each_missing_piece_named():
    if capabilities().cuda:
        pytest.skip("this machine has a CUDA device")
    ok, reason = availability("fa4_sm90")
    assert not ok and "needs a Hopper GPU (cc 9.x)" in reason
    try:
        import flash_attn.cute  # noqa: F401
    except ImportError:
        assert "needs flash-attn-4: flash_attn.cute is not importable" in reason
        assert "pip install 'attnwatch[fa4]'" in reason
    assert absolute_paths(reason) == []


def _stand_in_interface(launches_per_call: int) -> types.ModuleType:
    """A module shaped like flash_attn.cute.interface where it matters: `_flash_attn_fwd` looks
    up `_get_fwd_config` in its module globals and launches through `compile_cache[key]`."""
    module = types.ModuleType("stand_in_interface")
    exec(
        textwrap.dedent(f"""
        from collections import namedtuple
        calls = []
        FwdConfig = namedtuple("FwdConfig", "m_block_size n_block_size mma_pv_is_rs intra_wg_overlap")

        def _get_fwd_config(head_dim, causal):
            return FwdConfig(192 if head_dim <= 64 else 128, 128, True, not causal)

        def kernel(q, k, v, out, scale, causal_flag):
            calls.append((q, k, v, out, scale, causal_flag))

        def _flash_attn_fwd(q, k, v, softmax_scale=None, causal=False, out=None, _arch=None):
            assert _arch == 90
            cfg = _get_fwd_config(q.shape[-1], causal)
            key = (cfg, causal)
            if key not in _flash_attn_fwd.compile_cache:
                _flash_attn_fwd.compile_cache[key] = kernel
            for _ in range({launches_per_call}):
                _flash_attn_fwd.compile_cache[key](q, k, v, out, softmax_scale, causal)
            return out, None

        _flash_attn_fwd.compile_cache = {{}}
    """),
        module.__dict__,
    )
    return module


def test_the_timed_call_repeats_exactly_the_interface_s_one_compiled_launch():
    import torch

    interface = _stand_in_interface(1)
    cache, pick = interface._flash_attn_fwd.compile_cache, interface._get_fwd_config
    q, k, v, out = (torch.zeros(1, 8, 2, 64) for _ in range(4))
    run, config = record_launch(interface, q, k, v, out, 0.125, True)
    assert interface._flash_attn_fwd.compile_cache is cache and interface._get_fwd_config is pick  # restored
    assert len(interface.calls) == 1 and (config.m_block_size, config.intra_wg_overlap) == (192, False)
    assert run() is None  # the harness then reads the output buffer
    assert len(interface.calls) == 2
    first, again = interface.calls
    assert all(a is b for a, b in zip(first[:4], again[:4])) and again[4:] == (0.125, True)


def test_a_forward_of_more_than_one_launch_is_refused_not_timed_in_part():
    import torch

    interface = _stand_in_interface(2)
    cache = interface._flash_attn_fwd.compile_cache
    with pytest.raises(RuntimeError, match="made 2 compiled launches, expected exactly 1"):
        record_launch(interface, *(torch.zeros(1, 8, 2, 64) for _ in range(4)), 0.125, False)
    assert interface._flash_attn_fwd.compile_cache is cache


@pytest.mark.gpu
def test_on_hopper_one_timed_call_is_one_kernel_launch():
    """Where the package and a Hopper GPU are: what is timed is the forward's one kernel, and
    the configuration the package chose is recorded."""
    import torch

    from attnwatch.kernels.availability import skip_reason

    case = _case(causal=True)
    reason = skip_reason("fa4_sm90", case)
    if reason:
        pytest.skip(reason)
    prepared = get("fa4_sm90").prepare(case, torch.device("cuda"), 0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        prepared.fn()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1, kernels
    assert prepared.config.startswith("m") and prepared.config_source == "fixed"
