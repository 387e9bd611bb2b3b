"""Nsight Compute profiles kept between compares, per case: the same profiled work is not profiled twice.

Why: a compare profiles each side's decided cases once after its rounds (ci/compare/session.py
`add_ncu`, one ncu process per side); a warm one-variant compare on an H100 spent about 40 s in
ncu, half of it on the base. The base of a pull request is mostly the same main commit as the
last pull request's, and a re-run of a compare profiles the same binaries again. What a profile
identifies (the exact counters: instructions, launches, launch resources) is the same in every
profile of one build; the noisy counters are as good from an earlier profile of the same binary
on the same GPU model.

**The key.** An entry is used only for the same work, which all of these name: the case id; the
variant's fingerprint digest on the side profiled (ci/fingerprint/variant.py: its files, builds,
compiled binaries, libraries with the GPU and driver, and the plan's settings); the GPU model;
ncu's version; the sections and the ncu options that decide what is collected and how (the
metric list, cache control, replay mode, clocks: ci.ncu.profile.collection_options); the code of
the program ncu runs (ci/ncu/target.py and what it imports of this checkout) and the shared
harness of the side's checkout (ci/fingerprint/rules.toml [harness]: inputs, case definitions),
which no variant's fingerprint covers; and SCHEMA. A variant whose fingerprint is unknown or
missing, a target or harness that cannot be fingerprinted, a GPU not named, an ncu that does not
say its version: nothing of it is looked up or stored.

**Per case, not per request**, so a compare that decided other cases still reuses those profiled
before. Splitting is sound because nothing of a profile's records crosses cases: kernel rows and
metrics are each one case's (`kernel_index` counts within the case), and the bundle's
ncu_raw.csv is one or more whole tables (history.contract.ncu_csv, which checks each one). An
entry is one case's table: ncu's header and units lines and the case's own kernel rows (told
apart by their NVTX range, the case id, as the profile attributes kernels), each line as
`ncu --import` printed it. Nothing derived is stored: on a hit the table is parsed and
aggregated by the code a fresh pass uses (ci.ncu.parse, ci.ncu.profile.collect_records), and a
fresh case's table is stored only when it reads back to exactly the records its pass made. A
compare's ncu_raw.csv is then its fresh passes' tables as printed, then one table per cached
case. What describes a pass rather than a case (the target's stage seconds, replay passes, the
import's seconds, ncu's notes) is this compare's fresh passes' alone. Only a case profiled
without error, with every listed metric, by a pass that left nothing out (no notes), is stored.

**Where.** kernels.compile_cache's `<cache root>/ncu/<trust>`, by its rules: a private directory
per trust level, each entry's sha256 checked on the bytes read and its metadata repeating the
key asked for, writes staged and renamed into place. A damaged, truncated, foreign or tampered
entry, or one of another schema, is a miss (warned where the check can say why, and named in the
compare's log line): the case is profiled again and its entry replaced.

**Both sides.** The key names the variant's fingerprint, not the side: the head's unchanged
variant is the base's work, and a changed one keys binaries no other commit has until one does
(the merged commit, as the next pull request's base). A pull request's job writes only the
untrusted folder, which a main job never reads.
"""

from __future__ import annotations

import csv
import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from attnwatch.ci.child_env import IMPORT_ROOT
from attnwatch.ci.fingerprint.sources import PROJECT_PACKAGES, harness_closure, module_closure
from attnwatch.ci.fingerprint.variant import digest_of
from attnwatch.ci.ncu.metrics import replay_settings
from attnwatch.ci.ncu.parse import nvtx_column, nvtx_range_name, parse_ncu_csv
from attnwatch.ci.ncu.profile import (
    NcuProfile,
    collect_records,
    collection_options,
    find_ncu,
    ncu_version,
    profile_cases,
    requested_metrics,
)
from attnwatch.history.contract.bundle import NcuCaseMetrics, NcuKernelRow
from attnwatch.history.contract.ncu_csv import HEADER_START
from attnwatch.kernels.cases import Case
from attnwatch.kernels.compile_cache import CacheEntryWarning, CompileCache, open_cache

SCHEMA = "attnwatch.ncu-case-profile/1"
KIND = "ncu"  # the folder under the cache root
SUFFIX = ".csv"
TARGET = Path(__file__).resolve().with_name("target.py")


@dataclass
class CachedCase:
    """A verified entry: the case's table and the records this checkout reads from it."""

    table: str
    rows: list[NcuKernelRow]
    metrics: NcuCaseMetrics


@dataclass
class CacheUse:
    """What the cache did for one profile, for the compare's log line."""

    cached: list[str] = field(default_factory=list)  # case ids answered from the cache
    stored: list[str] = field(default_factory=list)  # case ids profiled now and stored
    ignored: dict[str, str] = field(default_factory=dict)  # case id -> why its entry was not used
    off: str | None = None  # why nothing was looked up (None: every case with a known fingerprint was)

    def summary(self, total: int) -> str:
        said = f"not cached: {self.off}" if self.off else f"{len(self.cached)} of {total} from the cache"
        if self.ignored:
            entries = "entry" if len(self.ignored) == 1 else "entries"
            why = "; ".join(f"{case_id}: {why}" for case_id, why in self.ignored.items())
            said += f", {len(self.ignored)} cache {entries} ignored ({why[:500]})"
        return said


def request_key(
    sections: tuple[str, ...], gpu_name: str | None, kernels_root: Path | None, cache_control: str | None
) -> tuple[dict | None, str | None]:
    """(the key fields every case of one profile shares, None), or (None, why there are none)."""
    if not gpu_name:
        return None, "no GPU model named"
    ncu = find_ncu()
    version = ncu_version(ncu) if ncu else ""
    if not version:
        return None, "no ncu that says its version"
    try:
        target = module_closure([TARGET], IMPORT_ROOT, packages=PROJECT_PACKAGES, dynamic_is_unknown=False)
        harness = harness_closure(Path(kernels_root) if kernels_root is not None else IMPORT_ROOT)
    except Exception as exc:  # noqa: BLE001 - profiling without the cache is the safe answer to any fault here
        return None, f"the profiled code could not be fingerprinted ({type(exc).__name__})"
    for name, closure in (("the profiled program", target), ("the side's shared harness", harness)):
        if closure.unknown:
            return None, f"{name} cannot be fingerprinted ({closure.unknown[0]})"
    return {
        "schema": SCHEMA,
        "gpu_name": gpu_name,
        "ncu_version": version,
        "sections": list(sections),
        "cache_control": cache_control or replay_settings().cache_control,
        "options": collection_options(sections, cache_control),
        "target": digest_of(target.files),
        "harness": digest_of(harness.files),
    }, None


def case_keys(cases: Sequence[Case], fingerprints: Mapping[str, dict]) -> dict[str, dict]:
    """case id -> its own key fields, for the cases whose variant has a known fingerprint (a digest
    and nothing unknown); `request_key`'s fields complete them."""
    keys = {}
    for case in cases:
        printed = fingerprints.get(case.variant) or {}
        digest = printed.get("digest")
        if isinstance(digest, str) and digest and not printed.get("unknown"):
            keys[case.id] = {"case_id": case.id, "variant_digest": digest}
    return keys


def read_case(case: Case, table: str, sections: tuple[str, ...], gpu_name: str, source: str | Path) -> CachedCase:
    """The records of `case` from its table, as a fresh pass makes them; ValueError when the table
    is not one whole profile of this case."""
    parsed = parse_ncu_csv(source, text=table, requested=requested_metrics(sections))  # NcuParseError: a ValueError
    if not parsed.kernels or any(kernel.nvtx_range != case.id for kernel in parsed.kernels):
        raise ValueError("its table holds no kernels of this case, or another case's")
    part = NcuProfile()
    collect_records(part, [case], parsed.kernels, gpu_name, {})
    metrics = part.case_metrics[0]
    if part.errors or metrics.error:
        raise ValueError(f"its profile is not whole ({metrics.error})")
    return CachedCase(table, part.kernel_rows, metrics)


def case_tables(text: str) -> dict[str, str]:
    """Each case's table from a profile's CSV (module doc); none for a case whose rows are in more
    than one table, or in a table whose rows are not one line each (`store` checks the rest)."""
    tables: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(HEADER_START):
            tables.append([line])
        elif tables and line.strip() and not line.startswith("=="):  # ncu's ==PROF== notes are no rows
            tables[-1].append(line)
    found: dict[str, list[str]] = {}
    spoiled: set[str] = set()
    for lines in tables:
        header = next(csv.reader(lines[:1]))
        column = nvtx_column(header)
        rows = [next(csv.reader([line]), []) for line in lines[1:]]
        units = 1 if rows and rows[0][:1] == [""] else 0  # the raw page's units row
        by_case: dict[str, list[str]] = {}
        for line, row in zip(lines[1 + units :], rows[units:]):
            case_id = nvtx_range_name(row[column]) if column is not None and len(row) == len(header) else None
            by_case.setdefault(case_id or "", []).append(line)
        whole = column is not None and "" not in by_case
        for case_id, own in by_case.items():
            if not whole or case_id in found:
                spoiled.add(case_id)
            found[case_id] = lines[: 1 + units] + own
    return {case_id: "\n".join(lines) + "\n" for case_id, lines in found.items() if case_id not in spoiled}


def lookup(
    cache: CompileCache, keys: dict[str, dict], cases: Sequence[Case], sections: tuple[str, ...], gpu_name: str
) -> tuple[dict[str, CachedCase], dict[str, str]]:
    """(case id -> its verified entry, case id -> why its entry was not used)."""
    hits: dict[str, CachedCase] = {}
    ignored: dict[str, str] = {}
    for case in cases:
        fields = keys.get(case.id)
        if fields is None:
            continue
        name = digest_of(fields)
        found = cache.read_keyed(name, SUFFIX, fields)  # warns where it can say why
        paths = cache.paths(name, SUFFIX)
        if found is None:
            if any(path.is_symlink() or path.exists() for path in paths):
                ignored[case.id] = "unreadable, or not private, or not matching its sha256 or key"
            continue
        try:
            hits[case.id] = read_case(case, found[0].decode("utf-8"), sections, gpu_name, paths[0])
        except ValueError as exc:  # UnicodeDecodeError and NcuParseError are ValueErrors
            ignored[case.id] = str(exc)[:200]
            warnings.warn(f"{paths[0]}: ignored, {exc}; profiling again", CacheEntryWarning, stacklevel=2)
    return hits, ignored


def store(
    cache: CompileCache,
    keys: dict[str, dict],
    cases: Sequence[Case],
    fresh: NcuProfile,
    sections: tuple[str, ...],
    gpu_name: str,
) -> list[str]:
    """Store the table of each case `fresh` profiled whole (module doc); the case ids stored."""
    if fresh.notes or not keys or fresh.ncu_version != next(iter(keys.values()))["ncu_version"]:
        return []
    tables = case_tables(fresh.raw_csv)
    stored = []
    for case in cases:
        fields, table = keys.get(case.id), tables.get(case.id)
        if fields is None or table is None or case.id in fresh.errors:
            continue
        rows = [row for row in fresh.kernel_rows if row.case_id == case.id]
        metrics = [m for m in fresh.case_metrics if m.case_id == case.id]
        try:
            again = read_case(case, table, sections, gpu_name, "the fresh profile")
        except ValueError:
            continue
        if again.rows == rows and [again.metrics] == metrics:
            if cache.store_bytes(digest_of(fields), SUFFIX, table.encode("utf-8"), fields, case_id=case.id):
                stored.append(case.id)
    return stored


def merged(cases: Sequence[Case], fresh: NcuProfile, hits: dict[str, CachedCase]) -> NcuProfile:
    """`fresh` with the cached cases' records in the cases' order and their tables after its CSV."""
    profile = dataclasses.replace(fresh, kernel_rows=[], case_metrics=[])
    for case in cases:
        if case.id in hits:
            profile.kernel_rows += hits[case.id].rows
            profile.case_metrics.append(hits[case.id].metrics)
        else:
            profile.kernel_rows += [row for row in fresh.kernel_rows if row.case_id == case.id]
            profile.case_metrics += [m for m in fresh.case_metrics if m.case_id == case.id]
    tables = [hits[case.id].table for case in cases if case.id in hits]
    profile.raw_csv = "\n".join(part for part in (fresh.raw_csv, *tables) if part)
    return profile


def profile_through_cache(
    cases: Sequence[Case],
    out_dir: Path,
    *,
    fingerprints: Mapping[str, dict],
    sections: tuple[str, ...],
    gpu_name: str | None,
    kernels_root: Path | None = None,
    deadline: float | None = None,
    cache_control: str | None = None,
    directory: Path | None = None,
) -> tuple[NcuProfile, CacheUse]:
    """ci.ncu.profile.profile_cases of `cases`, answering from the cache what it holds (module doc)
    and storing what it profiles; `fingerprints`: the side's, variant -> fingerprint. The profile's
    `seconds` count the cache's reads and writes too. `directory`: the cache folder (default:
    `<cache root>/ncu/<trust>`)."""
    started = time.monotonic()
    use = CacheUse()
    own = case_keys(cases, fingerprints)
    common, use.off = request_key(sections, gpu_name, kernels_root, cache_control) if own else (None, None)
    if not own:
        use.off = "no profiled variant has a known fingerprint"
    keys = {case_id: {**common, **fields} for case_id, fields in own.items()} if common else {}
    cache = open_cache(KIND, directory, "the ncu profile cache") if keys else None
    if keys and cache is None:
        use.off = "the cache folder cannot be used"
    hits: dict[str, CachedCase] = {}
    if cache is not None and gpu_name:
        hits, use.ignored = lookup(cache, keys, cases, sections, gpu_name)
    misses = [case for case in cases if case.id not in hits]
    if misses:
        fresh = profile_cases(
            misses,
            out_dir,
            sections=sections,
            kernels_root=kernels_root,
            gpu_name=gpu_name,
            deadline=deadline,
            cache_control=cache_control,
        )
    else:
        fresh = NcuProfile(ncu_version=common["ncu_version"] if common else "")
    if cache is not None and gpu_name:
        use.stored = store(cache, keys, misses, fresh, sections, gpu_name)
    use.cached = [case.id for case in cases if case.id in hits]
    profile = merged(cases, fresh, hits)
    profile.seconds = time.monotonic() - started
    return profile, use
