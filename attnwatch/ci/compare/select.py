"""Which variants a compare measures: those whose fingerprints differ, and a few that do not.

Pure (no I/O): it reads the two sides' variant fingerprints (ci/fingerprint/variant.py, made by
each side's worker after its builds) and the two checkouts' shared-harness fingerprints
(ci/fingerprint/sources.harness_closure), and decides per variant:

* the reference (attention's baseline, kernels.registry.reference: the gap the comment leads
  with is taken against it) is always measured;
* a variant whose fingerprint is unknown on either side, or differs, is measured, with the
  files (or builds, libraries, settings) that differ as its reason;
* another operator's baseline (RMSNorm's `rmsnorm_torch`) is measured only when a variant of
  its operator is measured because it changed: its gaps are taken against that baseline, and
  with nothing of the operator changed it would only cost time (its cases and correctness
  checks). Being drawn as the canary does not count as a change. A changed variant whose
  operator is not known measures every baseline. A baseline not needed is reported as any
  unchanged variant (and may itself be drawn as the canary);
* of the variants identical on both sides, `canary` of them, rotated by the head commit so
  that successive pull requests cover different ones (never one of `[selection] never_canary`,
  each with its reason: a variant whose cold build alone costs more than the verdict's time),
  are measured anyway as an A/A check
  whose verdicts the comment shows as such: a canary that moves says the fingerprint missed
  something or the noise floor is off;
* the rest are reported "unchanged: identical code and binaries", neither timed nor checked.

Profiling (`profiled_cases`): when a compare profiles its decided changes, it also profiles the
other cases of the variants whose code differs, so a re-run finds them all in the profile cache.

Correctness (`head_checks`): only the head's variants whose fingerprint differs are checked
(every measured one when everything is measured); the base side checks nothing. The base is
the merge base, which the default branch's own job checked on its push, and the comparison
reads only the head's checks; the reference and the canary run identical code on both sides.

Everything is measured when forced (`--all`), when the shared harness differs or cannot be
fingerprinted on a side (what it changes, no variant's fingerprint can see), or when the
library versions of the two sides differ.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from attnwatch.ci.compare.report import SelectionRecord, VariantChoice

UNCHANGED = "unchanged: identical code and binaries"
REFERENCE = "the reference, attention's baseline (every gap of its cases is taken against it): always measured"
BECAUSE = ", measured because "
BASELINE_REASON = "{operator}'s baseline (every gap of its cases is taken against it)" + BECAUSE + "{changed} changed"
CANARY = "A/A canary: identical on both sides, measured as a check of the fingerprint"
PARTS = ("files", "builds", "binaries", "libraries", "settings")


@dataclass
class Selection:
    """The decision, per variant: measured (with why) or skipped (with why)."""

    measured: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    canary: list[str] = field(default_factory=list)
    reference: str | None = None
    everything: str | None = None  # why every variant is measured; None when it selected


def harness_change(
    base: dict[str, str], head: dict[str, str], base_unknown: list[str], head_unknown: list[str]
) -> str | None:
    """Why the shared harness forces measuring everything, or None when it is identical."""
    for side, unknown in (("base", base_unknown), ("head", head_unknown)):
        if unknown:
            return f"the {side}'s shared harness cannot be fingerprinted ({unknown[0]})"
    differ = sorted(k for k in base.keys() | head.keys() if base.get(k) != head.get(k))
    if differ:
        return f"the shared harness changed ({_listed(differ)})"
    return None


def library_change(base: dict[str, dict], head: dict[str, dict]) -> str | None:
    """Why different library versions on the two sides force measuring everything."""
    for name in sorted(base.keys() & head.keys()):
        b, h = base[name].get("libraries"), head[name].get("libraries")
        if b is not None and h is not None and b != h:
            key = next(k for k in sorted(b.keys() | h.keys()) if b.get(k) != h.get(k))
            return f"the sides run different libraries ({key}: {b.get(key)} vs {h.get(key)})"
    return None


def difference(base: dict | None, head: dict | None) -> str | None:
    """Why one variant's two fingerprints do not vouch for identical timed work (None: identical)."""
    for side, fp in (("base", base), ("head", head)):
        if not fp:
            return f"not on the {side} side"
        if not fp.get("digest"):
            return f"fingerprint unknown on the {side} side: {fp.get('unknown') or 'no digest'}"
    assert base is not None and head is not None  # each was checked above
    if base["digest"] == head["digest"]:
        return None
    bf, hf = base.get("files") or {}, head.get("files") or {}
    files = sorted(k for k in bf.keys() | hf.keys() if bf.get(k) != hf.get(k))
    if files:
        return f"changed: {_listed(files)}"
    parts = [p for p in PARTS[1:] if base.get(p) != head.get(p)]
    return f"changed: {', '.join(parts) or 'fingerprint'}"


def head_checks(selection: Selection, base: dict[str, dict], head: dict[str, dict]) -> list[str]:
    """The head's variants whose correctness a selecting compare checks (module docstring)."""
    if selection.everything:
        return list(selection.measured)
    return [v for v in selection.measured if difference(base.get(v), head.get(v)) is not None]


def profiled_cases(decided: list[str], variant_of: dict[str, str], changed: list[str], limit: int) -> list[str]:
    """The case ids a compare profiles, in the order to profile them: every decided change first,
    then, when at least one case is to be profiled anyway and the total stays within `limit`, the
    other cases of the variants whose code differs (`changed`, `head_checks`' answer), in the
    order of `variant_of` (every planned case id -> its variant).

    Which of a changed variant's cases the rounds decide wobbles from one compare to the next (a
    case just under the minimum effect is "sure but small" in one run and "no change" in the
    next), and each case a side's profile cache lacks costs that side an ncu process start (about
    5 s) on the re-run of a job or the next pull request over the same base. Profiling all of
    them once costs well under a second per case in the run that starts the profiler anyway
    (docs/benchmarks/compare.md, "The verdict while you wait")."""
    if not decided:
        return []
    wanted = set(changed)
    extra = [cid for cid, variant in variant_of.items() if variant in wanted and cid not in decided]
    return list(decided) + extra if len(decided) + len(extra) <= limit else list(decided)


def never_canary(selection_rules: dict) -> tuple[str, ...]:
    """The `never_canary` patterns of ci/fingerprint/rules.toml's [selection]; an entry without
    its `variants` pattern or its `reason` is refused by name (a rule nobody can explain)."""
    patterns = []
    for k, entry in enumerate(selection_rules.get("never_canary", [])):
        for key in ("variants", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"rules.toml: selection.never_canary[{k}].{key} must be a non-empty string")
        patterns.append(entry["variants"])
    return tuple(patterns)


def canary_order(names: list[str], rotation: str) -> list[str]:
    """`names` in an order that a new head commit reshuffles (deterministic for one commit)."""
    return sorted(names, key=lambda n: hashlib.sha256(f"{rotation}\0{n}".encode()).hexdigest())


def select_variants(
    variants: list[str],
    base: dict[str, dict],
    head: dict[str, dict],
    *,
    reference: str | None,
    rotation: str,
    canary: int,
    baselines: dict[str, str] | None = None,
    everything: str | None = None,
    not_canary: tuple[str, ...] = (),
) -> Selection:
    """Decide for each of `variants` (in order). `reference`: attention's baseline, always measured.
    `baselines`: each operator's baseline (operator -> variant), measured when a variant of that
    operator changed; a variant's operator is its fingerprint's `operator` (ci/fingerprint/variant.py).
    `everything`: a reason to measure all of them (--all, a harness or library change), else None
    to select by fingerprint. `not_canary`: patterns of variants never drawn as the canary
    (never_canary). `Selection.reference` names the baselines measured."""
    out = Selection()
    everything = everything or library_change(base, head)
    if everything:
        out.everything = everything
        out.measured = {v: everything for v in variants}
        out.reference = ", ".join(v for v in variants if v == reference or v in (baselines or {}).values()) or None
        return out
    unchanged = []
    for name in variants:
        why = difference(base.get(name), head.get(name))
        if name == reference:
            out.measured[name] = REFERENCE
        elif why is not None:
            out.measured[name] = why
        else:
            unchanged.append(name)
    served = _served_baselines(list(out.measured), base, head, reference, baselines or {})
    unchanged = [n for n in unchanged if n not in served]
    out.measured.update(served)
    out.measured = {v: out.measured[v] for v in variants if v in out.measured}  # in the variants' order
    # A canary must be timed to vouch for anything: one this runner cannot run only reports "skipped".
    runnable = [
        n
        for n in unchanged
        if (head.get(n) or {}).get("available", True) and not any(fnmatchcase(n, p) for p in not_canary)
    ]
    out.canary = sorted(canary_order(runnable, rotation)[: max(0, canary)])
    for name in unchanged:
        if name in out.canary:
            out.measured[name] = CANARY
        else:
            out.skipped[name] = UNCHANGED
    baseline_names = {reference, *(baselines or {}).values()}
    out.reference = ", ".join(v for v in out.measured if v in baseline_names and v not in out.canary) or None
    return out


def operator_of(name: str, base: dict[str, dict], head: dict[str, dict]) -> str | None:
    """A variant's operator as its fingerprint records it (the head's, else the base's)."""
    return (head.get(name) or {}).get("operator") or (base.get(name) or {}).get("operator")


def _served_baselines(
    changed: list[str], base: dict[str, dict], head: dict[str, dict], reference: str | None, baselines: dict[str, str]
) -> dict[str, str]:
    """The baselines (other than the reference) that a changed variant of their operator needs,
    with why: {baseline: reason}. A changed variant of unknown operator needs every baseline."""
    needs: dict[str, list[str]] = {}
    for name in changed:
        if name == reference or name in baselines.values():
            continue
        operator = operator_of(name, base, head)
        for op in [operator] if operator in baselines else list(baselines) if operator is None else []:
            needs.setdefault(op, []).append(name)
    return {
        baselines[op]: BASELINE_REASON.format(operator=op, changed=_listed(names))
        for op, names in needs.items()
        if baselines[op] != reference and baselines[op] not in changed
    }


def _listed(items: list[str], most: int = 6) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def selection_record(
    selection: Selection, planned: dict[str, int], base: dict[str, dict], head: dict[str, dict]
) -> SelectionRecord:
    """compare.json's account of `selection`: every planned variant (name -> its case count), measured
    or not, with why and both sides' fingerprint digests."""
    choices = []
    for name, cases in planned.items():
        measured = name in selection.measured
        choices.append(
            VariantChoice(
                name,
                measured,
                (selection.measured if measured else selection.skipped).get(name, ""),
                cases,
                (base.get(name) or {}).get("digest"),
                (head.get(name) or {}).get("digest"),
            )
        )
    return SelectionRecord(choices, selection.reference, list(selection.canary), selection.everything)
