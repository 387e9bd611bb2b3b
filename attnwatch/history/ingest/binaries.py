"""A run's kernel binaries into the history: each binary's static code once, and the run's links.

sass.json (history.contract.sass_file) lists each binary the run's profiled variants ran, by
sha256, with its kernels' instruction mixes. Runs of one build share their binaries, so a binary
the history already holds is not written again: only `run_binaries`, the run's variant → digest
links, is always written (migration 016). On a lake, a new digest is claimed before its rows
are inserted (history.store.transactions.Claims), so two ingests of runs sharing a new binary
conflict and one retries, rather than both writing it.
"""

from __future__ import annotations

from attnwatch.history.contract.loaded_bundle import LoadedBundle
from attnwatch.history.store.arrow_insert import insert_arrow, rows_to_arrow
from attnwatch.history.store.transactions import Claims

TABLES = ("sass_kernels", "sass_mix", "run_binaries")


def write_binaries(con, claims: Claims, b: LoadedBundle) -> dict[str, int]:
    """The bundle's binaries the history lacks, and the run's links to all of them: table -> rows."""
    if b.sass is None:
        return dict.fromkeys(TABLES, 0)
    digests = sorted({binary.digest for binary in b.sass.binaries})
    stored = {
        d
        for (d,) in con.execute(
            "SELECT DISTINCT digest FROM sass_kernels WHERE digest IN (SELECT unnest(?))", [digests]
        ).fetchall()
    }
    new = [binary for binary in b.sass.binaries if binary.digest not in stored]
    for binary in new:
        claims.take("binary", binary.digest)
    kernels = [
        {
            "digest": binary.digest,
            "kernel_name": k.name,
            "loops": k.loops,
            "registers": k.registers,
            "stack": k.stack,
            "shared": k.shared,
            "local": k.local,
        }
        for binary in new
        for k in binary.kernels
    ]
    mix = [
        {"digest": binary.digest, "kernel_name": k.name, "opcode": c.opcode, "place": c.where, "count": c.count}
        for binary in new
        for k in binary.kernels
        for c in k.mix
    ]
    links = [{"run_id": b.manifest.run_id, "variant": v.variant, "digest": v.digest} for v in b.sass.variants]
    return {
        "sass_kernels": insert_arrow(con, "sass_kernels", rows_to_arrow(kernels)),
        "sass_mix": insert_arrow(con, "sass_mix", rows_to_arrow(mix)),
        "run_binaries": insert_arrow(con, "run_binaries", rows_to_arrow(links)),
    }
