"""The static code of the binaries a run profiled, for the bundle's sass.json.

A stored alert says what changed in the code the GPU ran the way a compare does (history
.detection.stored_code diffs two runs' records with history.analysis.sass_diff), so a run
records what that diff reads: for each nvcc-built variant it profiled, the cubin its kernels
were built into (`kernels.cuda.launch.build` through ci/compare/binaries.py, a hit of the
compile cache the run itself filled, for the device's architecture), read with `cuobjdump`
(history.analysis.sass, cached by the binary's sha256) into each kernel's instruction mix.
Triton and CuPy variants compile at run time in the measuring process and are not read, as in a
compare. Nothing is recorded when no variant was profiled on a GPU (a CPU run), and a build or a
tool that fails costs the record, with the reason as the ncu pass's note, never the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from attnwatch.ci.compare.binaries import NVCC_VARIANTS, sass_cache_dir, variant_cubins
from attnwatch.history.analysis.sass import SassCache, SassError, binary_digest
from attnwatch.history.analysis.sass_diff import kernel_mix
from attnwatch.history.contract.sass_file import SassRecords, sass_records


def record_sass(
    variants: Iterable[str], kernels_root: Path | None, work: Path, arch: str = "", cache: Path | None = None
) -> tuple[SassRecords | None, str | None]:
    """(the records of the nvcc variants' binaries, None) or (None, why none were read); (None,
    None) when no variant is an nvcc one. `arch` "" is the device's, as the run built."""
    nvcc = sorted(set(variants) & set(NVCC_VARIANTS))
    if not nvcc:
        return None, None
    files, why = variant_cubins(kernels_root, nvcc, Path(work), arch)
    if why or len(files) != len(nvcc):
        return None, why or f"{len(files)} cubins for {len(nvcc)} variants"
    reader = SassCache(cache or sass_cache_dir())
    binaries, links = {}, {}
    try:
        for variant, path in zip(nvcc, files):  # one cubin per variant, in the order asked
            digest = binary_digest(path)
            binaries[digest] = [kernel_mix(code) for code in reader.read(path).values()]
            links[variant] = [digest]
    except SassError as exc:
        return None, str(exc)
    return sass_records(binaries, links), None
