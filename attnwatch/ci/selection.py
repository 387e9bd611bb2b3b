"""Which cases a command measures: one reading of --shapes/--variants/--dtypes/--causal.

`attnwatch run`, `attnwatch compare`, `attnwatch ncu` and scripts/gpu_check.py all select cases
the same way, so the same flags mean the same cases everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from attnwatch.ci.errors import UserError
from attnwatch.ci.plan import PlannedCase, plan_cases

CAUSAL_MODES = {"both": [False, True], "yes": [True], "no": [False]}


@dataclass(frozen=True)
class Selection:
    set_name: str
    shapes: list
    variants: list[str]
    dtypes: list[str]
    causal: list[bool]
    cases: list[PlannedCase]


def select_cases(shapes: str, variants: str | None, dtypes: str | None, causal: str, device_kind: str) -> Selection:
    """The cases the flags name, grouped for interleaving (ci.plan.plan_cases)."""
    set_name, shape_list = select_shapes(shapes, device_kind)
    variant_names = select_variants(variants)
    dtype_list = select_dtypes(dtypes, set_name)
    modes = CAUSAL_MODES[causal]
    return Selection(
        set_name, shape_list, variant_names, dtype_list, modes, plan_cases(variant_names, shape_list, dtype_list, modes)
    )


# The device files through which a CUDA driver reaches a GPU: the Linux driver's control file, a
# Tegra (Jetson) GPU's, and WSL2's GPU paravirtualization. Where none exists no CUDA call can find
# a GPU, so torch need not be asked (a process that imports it: about 2 s on a 2-core CPU machine).
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvhost-ctrl-gpu", "/dev/dxg")


def detect_device_kind() -> str:
    """ "cuda" when a GPU is visible, asked without creating a CUDA context in this process: NVML
    first; where NVML names none (a Jetson has no NVML, a container may lack its library) torch,
    in a child process, unless no GPU device file exists at all."""
    from attnwatch.ci.environment import nvml_gpu, package_version

    if nvml_gpu() is not None:
        return "cuda"
    if package_version("torch") is None or not any(os.path.exists(path) for path in GPU_DEVICE_FILES):
        return "cpu"
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return "cuda" if probe.stdout.strip().endswith("True") else "cpu"


def select_shapes(spec: str, device_kind: str) -> tuple[str, list]:
    """(shape set name, shapes); a comma list of ids is the ad-hoc set "custom"."""
    from attnwatch.kernels.shapes import SHAPE_SETS, SHAPES, shape_set

    name = ("pr" if device_kind == "cuda" else "cpu") if spec == "auto" else spec
    if name in SHAPE_SETS:
        return name, shape_set(name)
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [i for i in ids if i not in SHAPES]
    if unknown or not ids:
        raise UserError(
            f"--shapes: unknown shape set or shape id(s) {unknown or spec!r}; sets: {', '.join(SHAPE_SETS)}"
        )
    return "custom", [SHAPES[i] for i in ids]


def select_variants(spec: str | None) -> list[str]:
    from attnwatch.kernels import registry

    known = [v.name for v in registry.all_variants() if v.family != "test"]
    if not spec:
        return known
    # A test-family variant (registered only by a module loaded on purpose, e.g. compare's
    # --variant-module) is measured when named, never by default.
    registered = {v.name for v in registry.all_variants()}
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in registered]
    if unknown:
        raise UserError(f"--variants: unknown variant(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names


def select_dtypes(spec: str | None, shape_set_name: str) -> list[str]:
    from attnwatch.ci.run_config import default_dtypes
    from attnwatch.kernels.cases import DTYPES

    dtypes = [d.strip() for d in spec.split(",")] if spec else default_dtypes(shape_set_name)
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise UserError(f"--dtypes: unknown dtype(s) {', '.join(bad)}; known: {', '.join(DTYPES)}")
    return dtypes
