"""What a pull request changes that a GPU can see, decided from the two checkouts' sources alone.

Before any GPU is asked for, the merge base and the head are compared (on a CPU, nothing
imported but each checkout's variant registry, ci/fingerprint/source_print.py):

* the shared harness (ci/fingerprint/rules.toml [harness], as the GPU compare reads it) and the
  files that decide how the GPU job runs ([affected] paths): a difference builds and measures
  every variant, and the GPU compare's own selection then decides what it times;
* each variant's source fingerprint: a variant identical on both sides is neither built nor
  measured nor checked for correctness (the measuring worker's binary digest decides only among
  the variants whose sources differ), except the reference, the baselines a changed variant
  needs and the A/A canary, built once per side (ci/compare/select.py decides which, from
  these fingerprints exactly as it does from the workers').

`Affected.gpu` False means nothing the GPU runs changed: the pull request gets that said in its
comment (with what was compared) and no GPU job. `build` is the variants the GPU compare builds
when it does run; None when it must build every variant (a registry that cannot be read).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnwatch.ci.compare.select import (
    CANARY,
    REFERENCE,
    difference,
    harness_change,
    never_canary,
    select_variants,
)
from attnwatch.ci.fingerprint.source_print import (
    RegistryListing,
    RegistryUnreadable,
    checkout_prints,
    file_prints,
    toolchain,
)
from attnwatch.ci.fingerprint.sources import Snapshot, harness_closure, rules

SCHEMA = "attnwatch-affected/1"
SOURCE_UNCHANGED = "unchanged: identical sources (not built)"


@dataclass
class Affected:
    """The decision and what it was made from (written as JSON by `attnwatch affected`)."""

    base_sha: str
    head_sha: str
    gpu: bool  # whether anything the GPU runs differs
    everything: str | None  # why every variant is built and measured; None when chosen per variant
    changed: dict[str, str] = field(default_factory=dict)  # variant -> why its sources differ
    build: list[str] | None = None  # the variants the GPU compare builds; None: every one
    unchanged: list[str] = field(default_factory=list)  # identical on both sides, not built
    canary: list[str] = field(default_factory=list)
    reference: str | None = None
    variants: list[str] = field(default_factory=list)  # every variant compared
    harness_files: int = 0  # how many harness and pipeline files were compared
    toolchain: dict[str, str | None] = field(default_factory=dict)
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        return asdict(self)


# What a need takes that the toolchain's versions show (source_print.toolchain: read from package
# metadata and PATH, nothing imported); a device need (cuda, hopper) cannot be judged here.
_TOOL_NEEDS = {"nvcc": "nvcc_version", "triton": "triton_version", "cupy": "cupy_version"}


def missing_here(needs: list[str], libraries: dict[str, str | None]) -> str | None:
    """The first need of `needs` that this runner's toolchain lacks (a tool, or an optional
    package not installed), or None. A canary drawn from the sources is built and measured only
    if its worker finds it available, so drawing one whose package is missing left compares
    without any A/A canary (fa4_sm90 on a runner without flash-attn-4)."""
    from attnwatch.kernels.optional_packages import NEED_DISTRIBUTIONS

    for need in needs:
        key = _TOOL_NEEDS.get(need) or (f"packages.{NEED_DISTRIBUTIONS[need]}" if need in NEED_DISTRIBUTIONS else None)
        if key is not None and not libraries.get(key):
            return need
    return None


def affected(
    base_root: Path,
    head_root: Path,
    *,
    base_sha: str = "",
    head_sha: str = "",
    python: str | None = None,
    planned: list[str] | None = None,
) -> Affected:
    """Compare the checkouts at `base_root` and `head_root` (module doc). The canary rotates with
    `head_sha`; `planned`: the variants a compare plans (--variants), which the selection and the
    canary are drawn from (default: every registered variant)."""
    listings = {"base": RegistryListing(base_root, python), "head": RegistryListing(head_root, python)}
    try:
        return _decide(base_root, head_root, listings, base_sha, head_sha, planned)
    finally:
        for listing in listings.values():
            listing.close()


def _decide(
    base_root: Path,
    head_root: Path,
    listings: dict[str, RegistryListing],
    base_sha: str,
    head_sha: str,
    planned: list[str] | None,
) -> Affected:
    """`affected`'s decision, with both checkouts' registry listings already started."""
    libraries = toolchain()
    seen = {"base": Snapshot(), "head": Snapshot()}  # each checkout read once for all its walks
    harness = {
        side: harness_closure(Path(root), seen[side]) for side, root in (("base", base_root), ("head", head_root))
    }
    pipeline_paths = [entry["path"] for entry in rules()["affected"]["paths"]]
    pipeline = {
        side: file_prints(Path(root), pipeline_paths) for side, root in (("base", base_root), ("head", head_root))
    }
    compared = len(harness["head"].files.keys() | harness["base"].files.keys()) + len(pipeline_paths)
    out = Affected(base_sha, head_sha, gpu=True, everything=None, harness_files=compared, toolchain=libraries)
    out.everything = harness_change(
        harness["base"].files, harness["head"].files, harness["base"].unknown, harness["head"].unknown
    )
    moved = [p for p in pipeline_paths if pipeline["base"][p] != pipeline["head"][p]]
    if out.everything is None and moved:
        out.everything = f"how the GPU job runs changed ({', '.join(moved)})"
    try:
        base_registry, base = checkout_prints(
            Path(base_root), libraries, snapshot=seen["base"], listing=listings["base"]
        )
        head_registry, head = checkout_prints(
            Path(head_root), libraries, snapshot=seen["head"], listing=listings["head"]
        )
    except RegistryUnreadable as exc:
        out.everything = out.everything or str(exc)
        return out  # build None: every variant, the workers' fingerprints decide
    names = list(dict.fromkeys([*head_registry.modules, *base_registry.modules]))
    if planned is not None:
        names = [n for n in names if n in set(planned)]
    out.variants, out.reference = names, head_registry.reference
    out.changed = {n: why for n in names if (why := difference(base.get(n), head.get(n))) is not None}
    if out.everything:
        out.build = list(head_registry.modules)
        return out
    cannot_run = [n for n in names if missing_here(head_registry.needs.get(n, []), libraries)]
    selection = select_variants(
        names,
        base,
        head,
        reference=head_registry.reference,
        rotation=head_sha,
        canary=int(rules()["selection"]["canary_variants"]),
        baselines=head_registry.baselines,
        not_canary=(*never_canary(rules()["selection"]), *cannot_run),
    )
    out.gpu = bool(out.changed)
    out.build = [n for n in selection.measured if n in head_registry.modules]
    out.canary = list(selection.canary)
    out.unchanged = [n for n in selection.skipped]
    return out


def roles(result: Affected) -> dict[str, str]:
    """Why each variant to build is built: its change, or its role (reference, canary, a baseline)."""
    out = {}
    for name in result.build or []:
        out[name] = result.changed.get(name) or (
            REFERENCE
            if name == result.reference
            else CANARY
            if name in result.canary
            else "a baseline a changed variant needs"
        )
    return out


def build_only_affected(cases: list, roots: dict[str, Path], head_sha: str, log=print) -> tuple[list, dict[str, str]]:
    """The planned cases (ci.plan.PlannedCase) of the variants the source fingerprints say to build,
    and {variant: SOURCE_UNCHANGED} for those left out. A variant either checkout does not register
    (one from --variant-module) is kept; with every variant to build, or a registry that cannot be
    read, nothing is left out."""
    result = affected(
        roots["base"], roots["head"], head_sha=head_sha, planned=list(dict.fromkeys(c.variant for c in cases))
    )
    if result.build is None or result.everything:
        log(f"compare: building every planned variant ({result.everything or 'no source fingerprints'})")
        return cases, {}
    keep = set(result.build) | {c.variant for c in cases if c.variant not in result.variants}
    left_out = {c.variant: SOURCE_UNCHANGED for c in cases if c.variant not in keep}
    log(
        f"compare: {len(left_out)} variants with identical sources neither built nor measured; building "
        f"{', '.join(sorted({c.variant for c in cases if c.variant in keep}))}"
    )
    return [c for c in cases if c.variant in keep], left_out
