"""Per-case rules, read from `history/analysis/case_rules.toml`: a minimum effect for some cases, and
cases to ignore until a date.

history/analysis/thresholds.toml says how large a step matters on a GPU; some cases measure worse than
their GPU (a ~10 µs kernel whose launch cost moves with the driver) or are known to be broken
for a while (a variant waiting on an upstream fix). Those are data with a reason, not code:

    [[min_effect]]              # the first matching entry wins
    case = "cuda_wmma/*"        # fnmatch pattern on the case id
    gpu = "NVIDIA H200"         # optional: only on this GPU (the exact recorded name)
    min_effect = 0.04
    reason = "..."

    [[ignore]]
    case = "torch_3op/*/fp32/*"
    gpu = "NVIDIA H200"         # optional
    reason = "..."
    expires = 2026-12-31        # a TOML date, required: an ignore nobody revisits hides a regression forever

An ignored case is still measured and shown, with its rule's reason; it fails no PR check and
opens no alert until the rule expires (the day after `expires`). Used by `attnwatch compare`
(ci.compare.analysis), `attnwatch detect` (history.detection.scan via attnwatch/cli/commands/detect.py)
and auto-resolution (history.detection.recovery).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from attnwatch.history.analysis.thresholds import ThresholdsError
from attnwatch.toml_reader import read_toml

# The repository's own file; `--case-rules` or $ATTNWATCH_CASE_RULES select another.
REPO_CASE_RULES = Path(__file__).resolve().parent / "case_rules.toml"
MAX_PATTERN = 200
MAX_REASON = 500


class CaseRulesError(ThresholdsError):
    """The case rules file is malformed, or an entry lacks its reason or expiry."""


@dataclass(frozen=True)
class EffectRule:
    case: str
    gpu: str | None
    min_effect: float
    reason: str


@dataclass(frozen=True)
class IgnoreRule:
    case: str
    gpu: str | None
    reason: str
    expires: dt.date

    def text(self) -> str:
        """For people: 'ignored until 2026-12-31: <reason>'."""
        return f"ignored until {self.expires.isoformat()}: {self.reason}"


def _matches(pattern: str, gpu: str | None, case_id: str, case_gpu: str | None) -> bool:
    return (gpu is None or gpu == case_gpu) and fnmatch.fnmatchcase(case_id, pattern)


@dataclass(frozen=True)
class CaseRules:
    effects: tuple[EffectRule, ...] = ()
    ignores: tuple[IgnoreRule, ...] = ()

    def min_effect(self, case_id: str, gpu: str | None, default: float) -> float:
        """The first matching entry's min_effect, else `default` (the GPU's thresholds)."""
        rule = next((r for r in self.effects if _matches(r.case, r.gpu, case_id, gpu)), None)
        return default if rule is None else rule.min_effect

    def ignored(self, case_id: str, gpu: str | None, today: dt.date | None = None) -> IgnoreRule | None:
        """The first unexpired ignore rule matching the case, or None."""
        today = today or dt.datetime.now(dt.timezone.utc).date()
        return next((r for r in self.ignores if today <= r.expires and _matches(r.case, r.gpu, case_id, gpu)), None)


def case_rules_path(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("ATTNWATCH_CASE_RULES")
    return Path(env) if env else REPO_CASE_RULES


@overload
def _text(file: Path, where: str, entry: dict, key: str, limit: int, required: Literal[True] = True) -> str: ...
@overload
def _text(file: Path, where: str, entry: dict, key: str, limit: int, required: bool) -> str | None: ...
def _text(file: Path, where: str, entry: dict, key: str, limit: int, required: bool = True) -> str | None:
    value = entry.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise CaseRulesError(f"{file}: {where}.{key}: expected non-empty text")
    if len(value) > limit or any(ord(ch) < 32 for ch in value):
        raise CaseRulesError(f"{file}: {where}.{key}: longer than {limit} characters or has control characters")
    return value.strip()


def _entries(file: Path, data: dict, name: str, known: set[str]) -> list[tuple[str, dict]]:
    entries = data.get(name, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CaseRulesError(f"{file}: [[{name}]]: expected an array of tables")
    out = []
    for i, entry in enumerate(entries):
        where = f"{name}[{i}]"
        unknown = set(entry) - known
        if unknown:
            raise CaseRulesError(f"{file}: {where}: unknown keys {sorted(unknown)} (known: {', '.join(sorted(known))})")
        out.append((where, entry))
    return out


def load_case_rules(path: str | Path | None = None) -> CaseRules:
    """The rules of `path` (default: the repository's file; a missing default file is no rules)."""
    file = case_rules_path(path)
    data = read_toml(
        file, "case rules", CaseRulesError, missing_ok=path is None and "ATTNWATCH_CASE_RULES" not in os.environ
    )
    if data is None:
        return CaseRules()
    unknown = set(data) - {"min_effect", "ignore"}
    if unknown:
        raise CaseRulesError(f"{file}: unknown sections {sorted(unknown)} (expected [[min_effect]] and [[ignore]])")
    effects = []
    for where, e in _entries(file, data, "min_effect", {"case", "gpu", "min_effect", "reason"}):
        value = e.get("min_effect")
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 < value <= 1
        ):
            raise CaseRulesError(f"{file}: {where}.min_effect: expected a number in (0, 1], got {value!r}")
        effects.append(
            EffectRule(
                _text(file, where, e, "case", MAX_PATTERN),
                _text(file, where, e, "gpu", MAX_PATTERN, False),
                float(value),
                _text(file, where, e, "reason", MAX_REASON),
            )
        )
    ignores = []
    for where, e in _entries(file, data, "ignore", {"case", "gpu", "reason", "expires"}):
        expires = e.get("expires")
        if isinstance(expires, dt.datetime) or not isinstance(expires, dt.date):
            raise CaseRulesError(f"{file}: {where}.expires: expected a date (expires = 2026-12-31), got {expires!r}")
        ignores.append(
            IgnoreRule(
                _text(file, where, e, "case", MAX_PATTERN),
                _text(file, where, e, "gpu", MAX_PATTERN, False),
                _text(file, where, e, "reason", MAX_REASON),
                expires,
            )
        )
    return CaseRules(tuple(effects), tuple(ignores))
