"""What changed in the code the GPU ran: the two sides' kernel binaries, read and diffed.

For each nvcc-built variant a compare explains, each side's cubin comes from that side's
`kernels` (`kernels.cuda.launch.build` in a child process whose PYTHONPATH puts the side's
checkout first, ci/child_env.py); the compare has just built both, so each build is a hit of
the compile cache. The cubins are read by history.analysis.sass (cached by sha256) and diffed by
history.analysis.sass_diff; a variant whose binaries differ gets its diff, which
ci/compare/analysis.py narrows to the kernels each case's call launched ("attn_wmma_d64_fp16:
+1 BAR in a loop") to lead that case's cause. Triton compiles at run time in the measuring
process, a binary per case: ci/compare/runtime_binaries.py diffs those by the digest each round
recorded. CuPy only loads the nvcc cubins (kernels/nvcc.py: no variant compiles through it at run
time); a variant without a line says nothing about its code.
A build or a tool that fails costs the line, never the compare.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:
    from attnwatch.history.analysis.sass_diff import BinaryDiff

from attnwatch.kernels.cuda.launch import SPECS

# The variants `kernels.cuda.launch.build` builds (this checkout's declaration of them).
NVCC_VARIANTS = tuple(SPECS)
BUILD_TIMEOUT_S = 600
_BUILD = (
    "import sys\nfrom attnwatch.kernels.cuda.launch import build\n"
    "for v in sys.argv[2:]:\n    print(build(v, sys.argv[1] or None).path)\n"
)


def variant_cubins(
    root: Path | None, variants: Iterable[str], work: Path, arch: str = "", env_extra: Mapping[str, str] | None = None
) -> tuple[list[Path], str | None]:
    """The cubins `root`'s kernels build for the nvcc variants among `variants` (arch "" is the
    device's), and why none came when the build failed."""
    from attnwatch.ci.child_env import child_env

    nvcc = [v for v in variants if v in NVCC_VARIANTS]
    if not nvcc:
        return [], None
    work.mkdir(parents=True, exist_ok=True)
    env = {**child_env(work, root), **(env_extra or {})}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BUILD, arch, *nvcc],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [], f"building {', '.join(nvcc)} took over {BUILD_TIMEOUT_S} s"
    if done.returncode != 0:
        return [], (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
    return [Path(line) for line in done.stdout.split() if line.endswith(".cubin")], None


def sass_cache_dir() -> Path:
    """Parsed SASS by binary digest, one directory per trust level as the compile cache's
    (kernels.compile_cache: a pull request's job cannot write what a main job reads)."""
    from attnwatch.kernels.compile_cache import default_cache_dir

    return default_cache_dir("sass")


def read_kernels(files: Iterable[Path], cache: Path | None = None) -> dict:
    """Every kernel of the files by name (history.analysis.sass; raises SassError)."""
    from attnwatch.history.analysis.sass import SassCache

    reader, kernels = SassCache(cache or sass_cache_dir()), {}
    for path in files:
        kernels.update(reader.read(path))
    return kernels


def code_changes(
    variants: Iterable[str], roots: Mapping[str, Path | None], work: Path, log=lambda message: None, arch: str = ""
) -> dict[str, BinaryDiff]:
    """variant -> how its kernels' code differs between base and head, for the variants whose
    binaries differ (module doc); `arch` "" builds for the device, as the compare's workers did
    (give it when known: finding the device's costs the child a torch import and a CUDA start).
    One child per side builds all of its variants, and the two sides build at once."""
    from concurrent.futures import ThreadPoolExecutor

    from attnwatch.history.analysis.sass import SassError
    from attnwatch.history.analysis.sass_diff import diff_binaries

    nvcc = sorted(set(variants) & set(NVCC_VARIANTS))
    if not nvcc:
        return {}
    with ThreadPoolExecutor(2) as pool:
        futures = {
            name: pool.submit(variant_cubins, roots.get(name), nvcc, Path(work) / name, arch)
            for name in ("base", "head")
        }
    built = {name: future.result() for name, future in futures.items()}
    out = {}
    for variant_index, variant in enumerate(nvcc):
        sides = []
        for name in ("base", "head"):
            files, why = built[name]
            if why or len(files) != len(nvcc):  # one cubin per variant, in the order asked
                log(f"compare: {variant}'s {name} binary not read: {why or f'{len(files)} cubins for {len(nvcc)}'}")
                break
            try:
                sides.append(read_kernels([files[variant_index]]))
            except SassError as exc:
                log(f"compare: {variant}'s {name} binary not read: {exc}")
                break
        if len(sides) == 2:
            diff = diff_binaries(*sides)
            if diff.changed:
                out[variant] = diff
    return out
