"""What changed in the code the GPU ran between two stored runs: their binaries' SASS, diffed.

A run whose ncu pass read its variants' binaries stored their static code by digest
(history.ingest.binaries, migration 016: `run_binaries`, `sass_kernels`, `sass_mix`). For a
step's case, the binaries of the case's variant (of a Triton case, the one binary it recorded
running: migration 017) in the step's run and in the run before it are diffed by
history.analysis.sass_diff exactly as a compare diffs the binaries it read
(ci/compare/binaries.py, runtime_binaries.py), so a stored alert's cause leads with the same
code part ("attn_k: +1 BAR in a loop"). Nothing is said where either run stored no binary for the variant (a CPU run,
a run from before sass.json, a variant whose binary was not read), where both ran the same
binaries, or where the history predates migration 016 (a read never migrates).
"""

from __future__ import annotations

from attnwatch.history.analysis.sass_diff import BinaryDiff, KernelMix, diff_binaries
from attnwatch.history.contract.sass_file import OpcodeCount, SassKernel, stored_kernel_mix
from attnwatch.history.store.exchange import base_tables, table_columns

_PAIRS = "SELECT unnest(?::VARCHAR[]) AS run_id, unnest(?::VARCHAR[]) AS case_id"
_DIGESTS = f"""
WITH p AS ({_PAIRS})
SELECT DISTINCT p.run_id, p.case_id, b.digest
FROM p
JOIN results r ON r.run_id = p.run_id AND r.case_id = p.case_id
JOIN run_binaries b ON b.run_id = p.run_id AND b.variant = r.variant {{own}}
"""
# A case that recorded the binary it ran (results.kernel_binary_sha256, migration 017: Triton's,
# one per configuration and shape) reads that binary alone among its variant's.
_OWN_BINARY = "AND (r.kernel_binary_sha256 IS NULL OR b.digest = r.kernel_binary_sha256)"
_KERNELS = """
SELECT k.digest, k.kernel_name, k.loops, k.registers, k.stack, k.shared, k.local, m.opcode, m.place, m.count
FROM sass_kernels k LEFT JOIN sass_mix m ON m.digest = k.digest AND m.kernel_name = k.kernel_name
WHERE k.digest IN (SELECT unnest(?::VARCHAR[]))
"""
Binary = dict[str, KernelMix]  # kernel name -> its mix


def stored_code_changes(con, steps: dict[tuple[str, str], str]) -> dict[tuple[str, str], BinaryDiff]:
    """(run, case) -> base run  ==>  (run, case) -> how the case's variant's binaries differ from
    the base run's, for the steps where both runs stored them and they differ (module doc)."""
    if not steps or "run_binaries" not in base_tables(con):
        return {}
    pairs = sorted(set(steps) | {(base, case) for (_, case), base in steps.items()})
    runs, cases = zip(*pairs)
    digests: dict[tuple[str, str], set[str]] = {}
    own = _OWN_BINARY if "kernel_binary_sha256" in table_columns(con, "results") else ""
    for run_id, case_id, digest in con.execute(_DIGESTS.format(own=own), [list(runs), list(cases)]).fetchall():
        digests.setdefault((run_id, case_id), set()).add(digest)
    binaries = _binaries(con, sorted({d for found in digests.values() for d in found}))
    out = {}
    for (run_id, case_id), base in steps.items():
        head_digests, base_digests = digests.get((run_id, case_id)), digests.get((base, case_id))
        if not head_digests or not base_digests or head_digests == base_digests:
            continue
        diff = diff_binaries(_merged(binaries, base_digests), _merged(binaries, head_digests))
        if diff.changed:
            out[(run_id, case_id)] = diff
    return out


def _binaries(con, digests: list[str]) -> dict[str, Binary]:
    """digest -> kernel name -> its stored mix."""
    if not digests:
        return {}
    stored: dict[str, dict[str, SassKernel]] = {}
    for digest, name, loops, reg, stack, shared, local, opcode, place, count in con.execute(
        _KERNELS, [digests]
    ).fetchall():
        kernel = stored.setdefault(digest, {}).setdefault(name, SassKernel(name, loops, [], reg, stack, shared, local))
        if opcode is not None:
            kernel.mix.append(OpcodeCount(opcode, place, count))
    return {digest: {name: stored_kernel_mix(k) for name, k in kernels.items()} for digest, kernels in stored.items()}


def _merged(binaries: dict[str, Binary], digests: set[str]) -> Binary:
    """Every kernel of a side's binaries by name, as a compare reads a variant's cubins."""
    out: Binary = {}
    for digest in sorted(digests):
        out.update(binaries.get(digest, {}))
    return out
