"""The static code of the binaries a run profiled, for the bundle's sass.json.

A stored alert says what changed in the code the GPU ran the way a compare does (history
.detection.stored_code diffs two runs' records with history.analysis.sass_diff), so a run
records what that diff reads: for each nvcc-built variant it profiled, the cubin its kernels
were built into (`kernels.cuda.launch.build` through ci/compare/binaries.py, a hit of the
compile cache the run itself filled, for the device's architecture), read with `cuobjdump`
(history.analysis.sass, cached by the binary's sha256) into each kernel's instruction mix.
A Triton variant compiles at run time, a binary per case: the digests its profiled cases
recorded (CaseTiming.kernel_binary_sha256) are found in Triton's cache folder and read the same
way (ci/compare/runtime_binaries.py), each linked to the variant; a stored cause reads a case's
own (history.detection.stored_code). CuPy only loads the nvcc cubins. Nothing is recorded when no
variant was profiled on a GPU (a CPU run), and a build, a missing binary or a tool that fails
costs its record, with the reason as the ncu pass's note, never the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Iterable, Mapping

from attnwatch.ci.compare.binaries import NVCC_VARIANTS, sass_cache_dir, variant_cubins
from attnwatch.history.analysis.sass import SassCache, SassError, binary_digest
from attnwatch.history.analysis.sass_diff import kernel_mix
from attnwatch.history.contract.sass_file import SassRecords, sass_records


def record_sass(
    variants: Iterable[str],
    kernels_root: Path | None,
    work: Path,
    arch: str = "",
    cache: Path | None = None,
    compiled_at_run_time: Mapping[str, Collection[str]] | None = None,
    folder: Path | None = None,
) -> tuple[SassRecords | None, str | None]:
    """(the records of the binaries read, why some or all were not) for the nvcc variants among
    `variants` (`arch` "" is the device's, as the run built) and `compiled_at_run_time`
    (variant -> the digests its cases recorded, found under `folder`, default Triton's cache
    folder); (None, None) when there is nothing to read."""
    reader = SassCache(cache or sass_cache_dir())
    binaries: dict[str, list] = {}
    links: dict[str, list[str]] = {}
    whys = []
    nvcc = sorted(set(variants) & set(NVCC_VARIANTS))
    if nvcc:
        files, why = variant_cubins(kernels_root, nvcc, Path(work), arch)
        if why or len(files) != len(nvcc):
            whys.append(why or f"{len(files)} cubins for {len(nvcc)} variants")
        else:
            whys += _read(reader, zip(nvcc, files), binaries, links)
    if compiled_at_run_time:
        whys += _read_run_time(reader, compiled_at_run_time, folder, binaries, links)
    records = sass_records(binaries, links) if binaries else None
    return records, "; ".join(whys) or None


def _read(reader: SassCache, files: Iterable[tuple[str, Path]], binaries: dict, links: dict) -> list[str]:
    """Each (variant, cubin) read into `binaries` by digest and linked in `links`; why any failed."""
    for variant, path in files:
        try:
            digest = binary_digest(path)
            binaries[digest] = [kernel_mix(code) for code in reader.read(path).values()]
        except SassError as exc:
            return [str(exc)]
        links.setdefault(variant, []).append(digest)
    return []


def _read_run_time(
    reader: SassCache, wanted: Mapping[str, Collection[str]], folder: Path | None, binaries: dict, links: dict
) -> list[str]:
    from attnwatch.ci.compare.runtime_binaries import find_binaries
    from attnwatch.ci.tool_cache_manifest import triton_folder

    folder = folder or triton_folder()
    found = find_binaries(folder, {d for digests in wanted.values() for d in digests})
    whys = []
    for variant, digests in sorted(wanted.items()):
        missing = sorted(d[:12] for d in digests if d not in found)
        if missing:
            whys.append(f"{variant}'s binaries {', '.join(missing)} not in {folder}")
        whys += _read(reader, [(variant, found[d]) for d in sorted(digests) if d in found], binaries, links)
    return whys
