"""sass.json: the static code of a run's kernel binaries, one writer and one validator.

    {"schema": "attnwatch.sass", "schema_version": 1,
     "binaries": [{"digest": sha256, "kernels": [SassKernel]}],
     "variants": [{"variant": name, "digest": sha256}]}

What a stored alert needs to say what changed in the code the GPU ran, as a compare does
(history.analysis.sass_diff): each kernel's instruction mix by opcode and place (in a loop,
outside loops), its loop count and its static resources, for every binary the profiled variants
ran, keyed by the binary's sha256 so that a binary two runs share is one entry of the history
(history/store/migrations/016_sass.sql); `variants` links the run's variants to their binaries.
The ncu pass writes it beside ncu.json (ci/ncu/sass_record.py); a run without it (a CPU run, a
variant whose binary was not read, a bundle from before this file) has no static code, and its
alerts' causes read without it.

`sass_document` is the writer and calls `check_sass`, the validator the reader uses, on what it
returns. Each problem is one BundleError naming the file and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from attnwatch.history.analysis.sass import Resources
from attnwatch.history.analysis.sass_diff import IN_LOOP, OUTSIDE, KernelMix
from attnwatch.history.contract.bundle import SASS_FILE, SCHEMA_VERSIONS, file_envelope
from attnwatch.history.contract.checks import build_dataclass, check_envelope, json_ready, rule, rule_metadata
from attnwatch.history.contract.names import DIGEST, NAME
from attnwatch.history.errors import BundleError

SCHEMA = "attnwatch.sass"
PLACES = (IN_LOOP, OUTSIDE)
MAX_KERNELS = 4096  # kernels of one binary
MAX_OPCODES = 2048  # (opcode, place) pairs of one kernel


@dataclass
class OpcodeCount:
    opcode: str = field(metadata=rule_metadata(max_len=64))
    where: str = field(metadata=rule_metadata(choices=PLACES))
    count: int = field(metadata=rule_metadata(low=1))


@dataclass
class SassKernel:
    """One kernel of a binary: its mix and resources (cuobjdump -res-usage; None: not printed)."""

    name: str = field(metadata=rule_metadata(max_len=2000))
    loops: int = field(metadata=rule_metadata(low=0))
    mix: list[OpcodeCount] = field(metadata=rule_metadata(max_items=MAX_OPCODES))
    registers: int | None = rule(None, low=0)
    stack: int | None = rule(None, low=0)
    shared: int | None = rule(None, low=0)  # static shared memory, bytes
    local: int | None = rule(None, low=0)  # local memory per thread, bytes


@dataclass
class SassBinary:
    digest: str = field(metadata=rule_metadata(name=DIGEST))
    kernels: list[SassKernel] = field(metadata=rule_metadata(max_items=MAX_KERNELS))


@dataclass
class VariantBinary:
    variant: str = field(metadata=rule_metadata(name=NAME))
    digest: str = field(metadata=rule_metadata(name=DIGEST))


@dataclass
class SassRecords:
    binaries: list[SassBinary] = field(default_factory=list)
    variants: list[VariantBinary] = field(default_factory=list)


def sass_kernel(code: KernelMix) -> SassKernel:
    """A kernel's mix as sass.json stores it."""
    r = code.resources
    return SassKernel(
        code.name,
        code.loops,
        [OpcodeCount(op, where, n) for (op, where), n in sorted(code.counts.items()) if n],
        *((r.registers, r.stack, r.shared, r.local) if r else (None, None, None, None)),
    )


def stored_kernel_mix(kernel: SassKernel) -> KernelMix:
    """A stored kernel as the diff reads it (history.analysis.sass_diff; its own `kernel_mix`
    converts a kernel read from a binary)."""
    known = (kernel.registers, kernel.stack, kernel.shared, kernel.local)
    return KernelMix(
        kernel.name,
        {(c.opcode, c.where): c.count for c in kernel.mix},
        kernel.loops,
        Resources(*known) if all(v is not None for v in known) else None,  # type: ignore[arg-type]
    )


def records_code(records: SassRecords, digests: Iterable[str] | None = None) -> dict[str, KernelMix]:
    """kernel name -> its mix, over the records' binaries (those of `digests` when given), as
    ci/compare/binaries reads one side's cubins."""
    wanted = None if digests is None else set(digests)
    return {
        k.name: stored_kernel_mix(k)
        for b in records.binaries
        if wanted is None or b.digest in wanted
        for k in b.kernels
    }


def sass_records(binaries: Mapping[str, Iterable[KernelMix]], variants: Mapping[str, Iterable[str]]) -> SassRecords:
    """digest -> its kernels' mixes, variant -> its binaries' digests, as records."""
    return SassRecords(
        [
            SassBinary(d, [sass_kernel(k) for k in sorted(kernels, key=lambda k: k.name)])
            for d, kernels in sorted(binaries.items())
        ],
        [VariantBinary(v, d) for v, digests in sorted(variants.items()) for d in sorted(set(digests))],
    )


def sass_document(records: SassRecords, directory: Path | str) -> dict[str, Any]:
    """The sass.json document of these records, checked by `check_sass` as the reader will."""
    document = json_ready(file_envelope(SASS_FILE, binaries=records.binaries, variants=records.variants))
    check_sass(document, Path(directory) / SASS_FILE)
    return document


def check_sass(document: Any, path: Path | str) -> SassRecords:
    """A sass.json document as records: envelope, every field, sha256 digests, each binary,
    kernel and (opcode, place) once, and every variant's binary among the binaries."""
    document = check_envelope(document, path, SCHEMA, SCHEMA_VERSIONS[SCHEMA], {})
    body = {k: v for k, v in document.items() if k not in ("schema", "schema_version")}
    records: SassRecords = build_dataclass(SassRecords, body, path, "")
    seen: set[str] = set()
    for i, binary in enumerate(records.binaries):
        where = f"binaries[{i}]"
        if binary.digest in seen:
            raise BundleError(path, f"{where}.digest", f"binary {binary.digest[:12]}… listed twice")
        seen.add(binary.digest)
        names: set[str] = set()
        for j, kernel in enumerate(binary.kernels):
            if kernel.name in names:
                raise BundleError(path, f"{where}.kernels[{j}].name", f"kernel {kernel.name[:80]!r} listed twice")
            names.add(kernel.name)
            pairs: set[tuple[str, str]] = set()
            for k, count in enumerate(kernel.mix):
                if (count.opcode, count.where) in pairs:
                    raise BundleError(
                        path, f"{where}.kernels[{j}].mix[{k}]", f"{count.opcode} {count.where} counted twice"
                    )
                pairs.add((count.opcode, count.where))
    links: set[tuple[str, str]] = set()
    for i, link in enumerate(records.variants):
        if link.digest not in seen:
            raise BundleError(path, f"variants[{i}].digest", f"{link.digest[:12]}… is not among the binaries")
        if (link.variant, link.digest) in links:
            raise BundleError(path, f"variants[{i}]", f"{link.variant} → {link.digest[:12]}… listed twice")
        links.add((link.variant, link.digest))
    return records
