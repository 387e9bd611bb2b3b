"""Which counter changes explain a case that got slower or faster: the rule table, applied.

The rules are data (`ncu_rules.toml` beside this module, each with its reason): a rule reads
one or more Nsight Compute counters of the case on both sides, adds them into one signal, and
fires when the signal moved in the direction that explains the change by at least its
threshold (relative to the base, or to the rule's floor when the base is smaller, so that a
spill from zero bytes is a finite move). Fired rules are ranked by how many thresholds they
moved; an "exonerate" rule (the clock fell) outranks every cause, because a kernel is not
blamed for a slower GPU. The first rule's title is the one-line cause; the ranked list is the
evidence (the comment, compare.json and the alerts show both).

Counters come per kernel (bundle `ncu.json` kernels, the history's `ncu_metrics`);
`combine_kernels` makes one value per case by ncu's naming convention, the same rule
ci/ncu/metrics.toml writes out for its listed metrics: a `.sum` rollup adds over kernels, a
`launch__` resource takes the largest kernel's, everything else (averages, percentages, ratios,
rates) is weighted by each kernel's duration. It also counts the case's kernels (`KERNELS`, not
an ncu metric: the profile holds exactly one call per case, ci/ncu/target.py), so a call that
launches one kernel more (an unfused step, a copy, a spin) is seen even when no counter of the
others moves. Given each side's launches (history.analysis.kernel_launches), the cause also
names the kernels one side's call launches and the other's does not: "one kernel more" becomes
which kernel, and a library that picked another kernel at the same count (a cuDNN engine, a
cuBLAS tile) is named even when no counter rule fires.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from attnwatch.history.analysis.kernel_launches import Launch, launches_changed

RULES_FILE = Path(__file__).resolve().parent / "ncu_rules.toml"
DURATION = "gpu__time_duration.sum"
KERNELS = "case__kernels"  # kernels the case's one profiled call launched: counted, not collected
KINDS = ("cause", "exonerate")
DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class Condition:
    counter: str
    direction: str
    threshold: float


@dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    title: str
    counters: tuple[str, ...]
    direction: str
    threshold: float
    floor: float
    reason: str
    when: Condition | None = None


@dataclass
class CounterChange:
    """One fired rule: its signal on both sides, the relative move, and the move over the threshold."""

    rule: str
    title: str
    base: float
    head: float
    change: float  # (head - base) / max(|base|, floor)
    score: float


@dataclass
class Explanation:
    cause: str  # one line: the top rule's title with its numbers, or why nothing explains it
    changes: list[CounterChange] = field(default_factory=list)


class RulesError(ValueError):
    """ncu_rules.toml is malformed: the message names the file, the rule and the field."""


def combine_rule(metric: str) -> str:
    """How a counter's per-kernel values make the case's: "sum", "max" or "weighted" (module doc)."""
    if metric.endswith(".sum"):
        return "sum"
    if metric.startswith("launch__"):
        return "max"
    return "weighted"


def combine_kernels(kernels: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """One value per counter for a case from its kernels' counters (module doc)."""
    kernels = list(kernels)
    names = {name for k in kernels for name in k}
    out: dict[str, float] = {KERNELS: float(len(kernels))} if kernels else {}
    for name in names:
        pairs = [(k[name], k.get(DURATION)) for k in kernels if name in k and _finite(k[name])]
        if not pairs:
            continue
        rule = combine_rule(name)
        values = [v for v, _ in pairs]
        if rule == "sum":
            out[name] = sum(values)
        elif rule == "max":
            out[name] = max(values)
        else:
            weights = [w for _, w in pairs]
            if any(w is None or not _finite(w) for w in weights) or sum(weights) <= 0:
                out[name] = sum(values) / len(values)
            else:
                out[name] = sum(v * w for v, w in zip(values, weights)) / sum(weights)
    return out


def explain(base: Mapping[str, float], head: Mapping[str, float], slower: bool,
            rules: tuple[Rule, ...] | None = None,
            launches: tuple[Sequence[Launch], Sequence[Launch]] | None = None) -> Explanation:
    """Rank the rules that explain `head` being slower (or, `slower=False`, faster) than `base`;
    `launches` (base's, head's), when given, names the kernels that differ (module doc)."""
    rules = rules if rules is not None else load_rules()
    fired = []
    for rule in rules:
        change = _move(rule.counters, base, head, rule.floor)
        if change is None:
            continue
        score = _score(change, rule.direction, rule.threshold, slower)
        if score < 1.0:
            continue
        if rule.when is not None:
            cond = _move((rule.when.counter,), base, head, 1e-12)
            if cond is None or _score(cond, rule.when.direction, rule.when.threshold, slower) < 1.0:
                continue
        b, h = _signal(rule.counters, base), _signal(rule.counters, head)
        fired.append((rule.kind != "exonerate", -score, CounterChange(rule.name, rule.title, b, h, change, score)))
    fired.sort(key=lambda item: (item[0], item[1]))
    changes = [item[2] for item in fired]
    differ = launches_changed(*launches) if launches else None
    if not changes:
        cause = "no counter moved past its rule's threshold (history/analysis/ncu_rules.toml)"
        return Explanation(cause=f"{cause}; the call's kernels differ: {differ}" if differ else cause)
    top = changes[0]
    cause = f"{top.title} ({format_value(top.base)} → {format_value(top.head)}, {top.change:+.0%})"
    return Explanation(cause=f"{cause}: {differ}" if differ else cause, changes=changes)


def format_value(value: float) -> str:
    """Counters span bytes to ratios: 3 significant figures with an SI suffix."""
    magnitude = abs(value)
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _signal(counters: tuple[str, ...], values: Mapping[str, float]) -> float:
    return sum(values[c] for c in counters)


def _move(counters: tuple[str, ...], base: Mapping[str, float], head: Mapping[str, float],
          floor: float) -> float | None:
    """The relative move of the counters' sum, (head - base) / max(|base|, floor), or None
    when a side lacks one of them."""
    if not all(c in base and c in head and _finite(base[c]) and _finite(head[c]) for c in counters):
        return None
    b, h = _signal(counters, base), _signal(counters, head)
    return (h - b) / max(abs(b), floor)


def _score(move: float, direction: str, threshold: float, slower: bool) -> float:
    """The move in the explaining direction, in thresholds (negative: it moved the other way)."""
    sign = 1.0 if (direction == "up") == slower else -1.0
    return sign * move / threshold


@lru_cache(maxsize=4)
def load_rules(path: Path = RULES_FILE) -> tuple[Rule, ...]:
    """The rule table, checked: every field present and of its type, names unique."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RulesError(f"{Path(path).name}: cannot read: {exc}") from None
    rules, seen = [], set()
    for index, entry in enumerate(data.get("rule", [])):
        where = f"{Path(path).name}: rule {entry.get('name', index)!r}"
        try:
            when = entry.get("when")
            rule = Rule(
                name=str(entry["name"]), kind=entry["kind"], title=str(entry["title"]),
                counters=tuple(entry["counters"]), direction=entry["direction"],
                threshold=float(entry["threshold"]), floor=float(entry["floor"]), reason=str(entry["reason"]),
                when=Condition(when["counter"], when["direction"], float(when["threshold"])) if when else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RulesError(f"{where}: missing or bad field {exc}") from None
        for name, value, allowed in (("kind", rule.kind, KINDS), ("direction", rule.direction, DIRECTIONS),
                                     ("when.direction", rule.when.direction if rule.when else "up", DIRECTIONS)):
            if value not in allowed:
                raise RulesError(f"{where}: {name} {value!r} not in {allowed}")
        if rule.threshold <= 0 or rule.floor <= 0 or not rule.counters or not rule.reason.strip():
            raise RulesError(f"{where}: threshold and floor must be positive, counters and reason non-empty")
        if rule.name in seen:
            raise RulesError(f"{where}: listed twice")
        seen.add(rule.name)
        rules.append(rule)
    if not rules:
        raise RulesError(f"{Path(path).name}: no [[rule]] entries")
    return tuple(rules)
