"""What changed in the code of kernels compiled at run time: Triton's, per case.

A Triton variant compiles its kernel in the measuring process, once per configuration and
shape specialization, so its binary is a case's, not a variant's: each round records the sha256
of the cubin the case ran (CaseTiming.kernel_binary_sha256, from kernels.variant.Prepared).
Equal digests on the two sides are an exact fact: the same code ran. Where they differ, both
cubins are found by digest in Triton's cache folder, which the measuring children share
(kernels.compile_cache.tool_cache_env), read with cuobjdump (history.analysis.sass) and diffed
by opcode and place (history.analysis.sass_diff), as ci/compare/binaries.py does for the nvcc
variants' builds; ci/compare/analysis.py leads the case's cause with the part about its launched
kernels. A side that ran more than one binary over its rounds, a digest whose file is gone or
damaged, or a tool that fails costs the line (said in the log), never the compare.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Sequence

if TYPE_CHECKING:
    from attnwatch.ci.compare.rounds import RoundData
    from attnwatch.history.analysis.sass_diff import BinaryDiff

BINARY_SUFFIX = ".cubin"


def side_binaries(rounds: Sequence[RoundData], case_id: str) -> set[str]:
    """The digests of the binaries `case_id` ran over one side's rounds (empty: none recorded)."""
    recorded = (r.cases[case_id].kernel_binary for r in rounds if case_id in r.cases)
    return {digest for digest in recorded if digest}


def find_binaries(folder: Path, digests: Collection[str]) -> dict[str, Path]:
    """digest -> a cubin under `folder` whose content has it (sha256 of the file: a file whose
    bytes do not match its digest is never taken for it)."""
    from attnwatch.kernels.compile_cache import sha256_file

    wanted, found = set(digests), dict[str, Path]()
    if not wanted or not Path(folder).is_dir():
        return found
    for path in sorted(Path(folder).rglob(f"*{BINARY_SUFFIX}")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            digest = sha256_file(path)
        except OSError:
            continue
        if digest in wanted and digest not in found:
            found[digest] = path
            if len(found) == len(wanted):
                break
    return found


def runtime_code_changes(
    base: Sequence[RoundData],
    head: Sequence[RoundData],
    case_ids: Iterable[str],
    folder: Path,
    log: Callable[[str], None] = lambda message: None,
    cache: Path | None = None,
) -> dict[str, BinaryDiff]:
    """case id -> how its kernel's binary differs between base and head, for the cases among
    `case_ids` whose sides each ran one recorded binary and not the same one (module doc)."""
    from attnwatch.ci.compare.binaries import read_kernels
    from attnwatch.history.analysis.sass import SassError
    from attnwatch.history.analysis.sass_diff import diff_binaries

    pairs: dict[str, tuple[str, str]] = {}
    for case_id in sorted(set(case_ids)):
        sides = side_binaries(base, case_id), side_binaries(head, case_id)
        if not sides[0] or not sides[1]:
            continue
        if len(sides[0]) > 1 or len(sides[1]) > 1:
            log(f"compare: {case_id}: a side ran several binaries over its rounds; its code is not diffed")
            continue
        (b,), (h,) = sides
        if b != h:
            pairs[case_id] = (b, h)
    if not pairs:
        return {}
    files = find_binaries(folder, {d for pair in pairs.values() for d in pair})
    out = {}
    for case_id, digests in pairs.items():
        missing = [d[:12] for d in digests if d not in files]
        if missing:
            log(f"compare: {case_id}: binary {', '.join(missing)} not in {folder}; its code is not diffed")
            continue
        try:
            diff = diff_binaries(*(read_kernels([files[d]], cache) for d in digests))
        except SassError as exc:
            log(f"compare: {case_id}: binary not read: {exc}")
            continue
        if diff.changed:
            out[case_id] = diff
    return out
