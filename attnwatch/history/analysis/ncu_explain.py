"""Why a case got slower or faster: exact evidence first, then the counter rules against noise.

The cause line leads with what is exact (history.analysis.exact_counters: instructions executed
in total and per opcode, launch resources, per kernel of the call; and, when the caller read
both binaries, what changed in their static code, history.analysis.sass_diff): any difference
there is stated as a fact. Then the counter rules, which are data (`ncu_rules.toml` beside this
module, each with its reason): a rule reads one or more Nsight Compute counters of the case on
both sides, adds them into one signal, and fires when the signal moved in the direction that
explains the change by more than its counters' noise band (history.analysis.noise_bands: the
spread measured between profiles of one build). A counter compared exactly has no band: any
move fires. Where no noise was measured the rule's fixed threshold is the floor (relative to
the base, or to the rule's floor when the base is smaller, so that a spill from zero bytes is a
finite move), and the evidence says so. Fired rules are ranked by the time their move can
account for (the rule's `time_model`), so the first cause named is the biggest contributor. An
"exonerate" rule (the clock fell) outranks every cause while the code is the same (no exact
counter moved, the calls launch the same kernels, the static code diff is empty), because a
kernel is not blamed for a slower GPU; once the code changed, the code leads and the exonerating
move is one contributor among the others, ranked by its time share and worded as such (its
`contributor` title). "Unexplained" is said only when nothing exact and nothing beyond noise moved.

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
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping, Sequence, TypeGuard

from attnwatch.history.analysis.exact_counters import (
    PER_OPCODE,
    ExactChange,
    compare_exact,
    describe_exact,
    exact_counter,
    paired,
)
from attnwatch.history.analysis.kernel_launches import Launch, kernel_key, launches_changed
from attnwatch.history.analysis.noise_bands import NoiseBands, load_bands
from attnwatch.toml_reader import read_toml

RULES_FILE = Path(__file__).resolve().parent / "ncu_rules.toml"
DURATION = "gpu__time_duration.sum"
KERNELS = "case__kernels"  # kernels the case's one profiled call launched: counted, not collected
KINDS = ("cause", "exonerate")
DIRECTIONS = ("up", "down")
TIME_MODELS = ("scale", "inverse", "stall", "launches", "none")
EXACT_WIDTH = 1e-6  # an exact counter's "band": any move in the explaining direction fires
UNEXPLAINED = "unexplained: no exact counter differs and no counter moved beyond its noise band"
# The longest cause line any surface shows (PR comment, compare.json, alerts, notifications, the
# dashboard): `cause_line` keeps a longer one's last part (what the top rule accounts for) whole.
CAUSE_CHARS = 600


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
    time_model: str = "none"
    covers: tuple[str, ...] = ()
    contributor: str = ""  # an exonerating rule's title when the code changed too (module doc)


@dataclass
class CounterChange:
    """One fired rule: its signal on both sides, the relative move, and the move over the threshold."""

    rule: str
    title: str
    base: float
    head: float
    change: float  # (head - base) / |base| as a reader computes it; against the floor when the base is 0
    score: float  # the move, (head - base) / max(|base|, floor), over the band (or, no noise known, the threshold)
    band: float | None = None  # the noise band the move was judged against; None: the fixed threshold
    band_source: str = ""
    accounts_us: float | None = None  # the time change this move can account for (time_model), about


@dataclass
class Explanation:
    cause: str  # one line: the exact facts, the top rule with its numbers and share, or UNEXPLAINED
    changes: list[CounterChange] = field(default_factory=list)
    exact: list[ExactChange] = field(default_factory=list)


class RulesError(ValueError):
    """ncu_rules.toml is malformed: the message names the file, the rule and the field."""


def combine_rule(metric: str) -> str:
    """How a counter's per-kernel values make the case's: "sum", "max" or "weighted" (module doc)."""
    if metric.endswith(".sum") or metric.startswith(PER_OPCODE.rstrip("/")):
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
            weights = [w for _, w in pairs if _finite(w)]
            if len(weights) < len(pairs) or sum(weights) <= 0:
                out[name] = sum(values) / len(values)
            else:
                out[name] = sum(v * w for v, w in zip(values, weights)) / sum(weights)
    return out


def explain(
    base: Mapping[str, float],
    head: Mapping[str, float],
    slower: bool,
    rules: tuple[Rule, ...] | None = None,
    launches: tuple[Sequence[Launch], Sequence[Launch]] | None = None,
    *,
    case_id: str | None = None,
    bands: NoiseBands | None = None,
    measured_noise: Mapping[str, float] | None = None,
    time_change_us: float | None = None,
    code_change: str | None = None,
) -> Explanation:
    """Explain `head` being slower (or, `slower=False`, faster) than `base` (module doc).

    `launches` (base's, head's): the calls' kernels, with their exact counters, for the exact
    compare and the kernels that differ; `case_id` and `measured_noise` pick the noise bands
    (noise_bands.toml, or this compare's own spreads); `time_change_us`: the measured change
    (head - base) the shares are of, by default ncu's duration change; `code_change`: what the
    static code diff said (history.analysis.sass_diff.describe_binaries)."""
    rules = rules if rules is not None else load_rules()
    bands = bands if bands is not None else load_bands()
    differ = launches_changed(*launches) if launches else None
    exact = compare_exact(*launches) if launches else []
    code_moved = bool(exact or differ or code_change)  # the code changed: nothing exonerates it
    if differ and launches:
        base, head = _common_kernels(base, head, launches)
    delta_us = time_change_us if time_change_us is not None else _duration_change(base, head)
    # No move is shown accounting for more than the whole change (or, unmeasured, the base's whole time).
    limit = abs(delta_us) if delta_us else (base[DURATION] / 1000.0 if _finite(base.get(DURATION)) else None)
    scored = []
    for rule in rules:
        change = _move(rule.counters, base, head, rule.floor)
        if change is None:
            continue
        width, source = _width(rule, bands, case_id, measured_noise, base)
        if width == EXACT_WIDTH:  # any move in the explaining direction; scored on the threshold's scale for ranking
            score = _score(change, rule.direction, rule.threshold, slower)
            if score <= 0:
                continue
        else:
            score = _score(change, rule.direction, width, slower)
            if score <= 1.0:
                continue
        if rule.when is not None:
            cond = _move((rule.when.counter,), base, head, 1e-12)
            if cond is None or _score(cond, rule.when.direction, rule.when.threshold, slower) < 1.0:
                continue
        b, h = _signal(rule.counters, base), _signal(rule.counters, head)
        raw = _accounts(rule, base, head, slower, launches)
        shown = min(raw, limit) if raw is not None and limit is not None else raw
        title = rule.contributor if code_moved and rule.kind == "exonerate" and rule.contributor else rule.title
        shown_change = (h - b) / abs(b) if b else change  # judged against the floor, shown as read
        scored.append(
            (
                raw,
                CounterChange(
                    rule.name, title, b, h, shown_change, score, None if source == "threshold" else width, source, shown
                ),
            )
        )
    # exonerating rules first while the code is the same (module doc), then by the time each
    # move accounts for (its uncapped estimate), then rules with no time model by how far
    # outside their band they moved
    scored.sort(
        key=lambda item: (
            code_moved or _kind(rules, item[1].rule) != "exonerate",
            item[0] is None,
            -(item[0] or 0.0),
            -item[1].score,
        )
    )
    fired = [change for _, change in scored]
    fired = _covered_last(fired, rules)
    parts = [code_change] if code_change else []
    if exact:
        parts.append(describe_exact(exact))
    if fired:
        parts.append(_rule_text(fired[0], delta_us) + (f": {differ}" if differ else ""))
    elif differ:
        parts.append(f"the call's kernels differ: {differ}")
    if not exact and not fired and not code_change:
        parts.insert(0, UNEXPLAINED)
    return Explanation(cause=cause_line(parts), changes=fired, exact=exact)


def cause_line(parts: Sequence[str], limit: int = CAUSE_CHARS) -> str:
    """The one cause line every surface shows (module doc's order: the static code, the exact
    counters, the top rule with the time it accounts for), as one line of at most `limit`
    characters. When the parts are longer, the earlier ones are cut (with "…") so that the last,
    what the change cost, is read whole."""
    parts = [" ".join(p.split()) for p in parts if p and p.strip()]
    text = "; ".join(parts)
    if len(text) <= limit:
        return text
    last = parts[-1] if len(parts) > 1 and len(parts[-1]) < limit // 2 else ""
    head = "; ".join(parts[:-1]) if last else text
    room = limit - (len(last) + 2 if last else 0) - 1
    return head[:room].rstrip("; ") + "…" + (f"; {last}" if last else "")


def _common_kernels(
    base: Mapping[str, float], head: Mapping[str, float], launches: tuple[Sequence[Launch], Sequence[Launch]]
) -> tuple[Mapping[str, float], Mapping[str, float]]:
    """When the calls launch different kernels, the rules read the kernels both launch (their
    counters combined again), so that an added kernel's low occupancy or idle tensor pipe is not
    read as the others': the added or removed kernels are the `kernels` rule's, by their own
    durations. The whole call's kernel count (and throttled share) stay as they were."""
    pairs = paired(*launches)
    if not pairs or not all(b.counters and h.counters for b, h in pairs):
        return base, head
    sides = []
    for side, index in ((base, 0), (head, 1)):
        common = combine_kernels(dict(pair[index].counters) for pair in pairs)
        common.update({k: v for k, v in side.items() if k == KERNELS or k.startswith("timing__")})
        sides.append(common)
    return sides[0], sides[1]


def _covered_last(fired: list[CounterChange], rules: tuple[Rule, ...]) -> list[CounterChange]:
    """A fired rule that another fired rule covers (the same bytes seen further down) goes right after it."""
    by_name = {r.name: r for r in rules}
    names = {c.rule for c in fired}
    covered = {n for c in fired for n in by_name[c.rule].covers if n in names}
    out = []
    for change in fired:
        if change.rule in covered:
            continue
        out.append(change)
        out += [c for c in fired if c.rule in by_name[change.rule].covers and c.rule in covered]
    return out


def _kind(rules: tuple[Rule, ...], name: str) -> str:
    return next(r.kind for r in rules if r.name == name)


def _width(
    rule: Rule, bands: NoiseBands, case_id: str | None, measured: Mapping[str, float] | None, base: Mapping[str, float]
) -> tuple[float, str]:
    """The rule's band: measured noise its band; exact counters none (EXACT_WIDTH); else the threshold.
    A counter exact per kernel but noisy over some kernels (the instruction count: cuBLAS's
    kernels are not exact, exact_counters.toml) has a band, which is used."""
    band = bands.band(rule.counters, case_id, measured, base, rule.floor)
    if band is not None and band.width > 0:
        return band.width, band.source
    if all(c == KERNELS or exact_counter(c) is not None for c in rule.counters):
        return EXACT_WIDTH, "exact: compared with !="
    return rule.threshold, "threshold"


def _rule_text(top: CounterChange, delta_us: float | None) -> str:
    """`title (a → b, +x%, noise ±n%), accounts for about k of the +t µs`."""
    noise = (
        "exact"
        if top.band == EXACT_WIDTH
        else (
            f"noise ±{format_percent(top.band, sign=False)}"
            if top.band is not None
            else "no measured noise: past its fixed threshold"
        )
    )
    text = f"{top.title} ({format_value(top.base)} → {format_value(top.head)}, {format_percent(top.change)}, {noise})"
    if top.accounts_us is not None and delta_us:
        text += f", accounts for about {abs(top.accounts_us):.3g} of the {delta_us:+.3g} µs"
    return text


def _duration_change(base: Mapping[str, float], head: Mapping[str, float]) -> float | None:
    if _finite(base.get(DURATION)) and _finite(head.get(DURATION)):
        return (head[DURATION] - base[DURATION]) / 1000.0
    return None


def _accounts(
    rule: Rule,
    base: Mapping[str, float],
    head: Mapping[str, float],
    slower: bool,
    launches: tuple[Sequence[Launch], Sequence[Launch]] | None,
) -> float | None:
    """µs of the change (in its direction) the rule's move accounts for, by its time_model (ncu_rules.toml)."""
    t = base.get(DURATION)
    b, h = _signal(rule.counters, base), _signal(rule.counters, head)
    raw = None
    if rule.time_model == "launches" and launches:
        raw = _added_launch_ns(*launches) / 1000.0
    elif not _finite(t) or rule.time_model in ("none", "launches"):
        return None
    elif rule.time_model == "scale" and b > 0:
        raw = t / 1000.0 * (h / b - 1.0)
    elif rule.time_model == "inverse" and h > 0:
        raw = t / 1000.0 * (b / h - 1.0)
    elif rule.time_model == "stall":
        cycles_per_issue = 1.0 + sum(v for k, v in base.items() if "_issue_stalled_" in k and _finite(v))
        raw = t / 1000.0 * (h - b) / cycles_per_issue
    if raw is None or not math.isfinite(raw):
        return None
    return raw if slower else -raw


def _added_launch_ns(base: Sequence[Launch], head: Sequence[Launch]) -> float:
    """The head's call's kernel time less the base's, over the kernels one side launches more often."""

    def by_key(launches):
        out: dict[str, list[float]] = {}
        for launch in launches:
            out.setdefault(kernel_key(launch.name), []).append(
                launch.duration_ns if _finite(launch.duration_ns) else 0.0
            )
        return out

    b, h = by_key(base), by_key(head)
    total = 0.0
    for key in set(b) | set(h):
        extra = len(h.get(key, [])) - len(b.get(key, []))
        if extra > 0:
            total += sum(sorted(h[key])[-extra:])
        elif extra < 0:
            total -= sum(sorted(b[key])[extra:])
    return total


def format_value(value: float) -> str:
    """Counters span bytes to ratios: 3 significant figures with an SI suffix."""
    magnitude = abs(value)
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"


def format_percent(fraction: float, sign: bool = True) -> str:
    """A relative change as a reader needs it: whole percent from 1% up, two decimals under it
    (an exact counter's +0.12% is not "+0%"), "<0.01%" for what is smaller still but not 0."""
    magnitude = abs(fraction)
    if magnitude >= 0.01 or magnitude == 0:
        text = f"{magnitude:.0%}"
    elif magnitude >= 0.0001:
        text = f"{magnitude:.2%}"
    else:
        text = "<0.01%"
    return (("-" if fraction < 0 else "+") + text) if sign else text


def _finite(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _signal(counters: tuple[str, ...], values: Mapping[str, float]) -> float:
    return sum(values[c] for c in counters)


def _move(
    counters: tuple[str, ...], base: Mapping[str, float], head: Mapping[str, float], floor: float
) -> float | None:
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
    data = read_toml(path, "explanation rules", RulesError)
    rules, seen = [], set()
    for index, entry in enumerate(data.get("rule", [])):
        where = f"{Path(path).name}: rule {entry.get('name', index)!r}"
        try:
            when = entry.get("when")
            rule = Rule(
                name=str(entry["name"]),
                kind=entry["kind"],
                title=str(entry["title"]),
                counters=tuple(entry["counters"]),
                direction=entry["direction"],
                threshold=float(entry["threshold"]),
                floor=float(entry["floor"]),
                reason=str(entry["reason"]),
                when=Condition(when["counter"], when["direction"], float(when["threshold"])) if when else None,
                time_model=str(entry.get("time_model", "none")),
                covers=tuple(entry.get("covers", ())),
                contributor=str(entry.get("contributor", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RulesError(f"{where}: missing or bad field {exc}") from None
        for name, value, allowed in (
            ("kind", rule.kind, KINDS),
            ("direction", rule.direction, DIRECTIONS),
            ("when.direction", rule.when.direction if rule.when else "up", DIRECTIONS),
            ("time_model", rule.time_model, TIME_MODELS),
        ):
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
