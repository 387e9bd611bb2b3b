"""What moved across a step: the code, the kernel configuration, the environment, or the machine.

A step on main names a commit range: after the series' run before the step, up to the run at the
step. A series also steps when no code changed (a near-tie the autotuner resolved the other way,
a torch upgrade on the runners, another board of the pool), and bisecting such a step burns GPU
time and blames an innocent commit. So every step alert compares the two runs that bound its
range, part by part, and says which parts changed (pure: the caller reads the runs):

* code: the variant's fingerprint (`code_digest`, ci/fingerprint/variant.py: its files, binaries
  and build records without the chosen configuration) differs between the two runs;
* configuration: the kernel configuration the case ran with (results.kernel_config) differs;
* environment: a field of ENVIRONMENT_FIELDS differs: driver, CUDA, torch, Triton, cuDNN, cuBLAS,
  CuPy, nvcc, Python, the optional packages, the timing recipe, the harness;
* machine: the GPU (its UUID), its enforced power limit, or throttling (a run that throttled
  beside one that did not).

The attribution is the changed parts joined by " + " in that order, "none (noise suspect)" when
nothing recorded changed, and "unknown (no fingerprints recorded)" when either run has no code
fingerprint for the variant (a run from before bundle format 4, or one that could not be
fingerprinted): the code cannot be ruled in or out, so no attribution is guessed; the other
changes seen are still listed. A field that either run did not record is not compared.
Only an attribution with a code part is worth bisecting (attnwatch/cli/commands/bisect.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

PARTS = ("code", "configuration", "environment", "machine")
NONE = "none (noise suspect)"
UNKNOWN = "unknown (no fingerprints recorded)"

# Environment fields compared (runs columns; results' timing_recipe rides along as a point field).
ENVIRONMENT_FIELDS = {
    "driver_version": "driver",
    "cuda_version": "CUDA",
    "torch_version": "torch",
    "triton_version": "Triton",
    "cudnn_version": "cuDNN",
    "cublas_version": "cuBLAS",
    "cupy_version": "CuPy",
    "nvcc_version": "nvcc",
    "python_version": "Python",
    "packages": "optional packages",
    "timing_recipe": "timing recipe",
    "harness_digest": "harness",
}
MACHINE_FIELDS = {"gpu_uuid": "GPU", "power_limit_w": "power limit (W)", "throttled": "throttling"}
# The runs table's columns among them (the rest are per result: the recipe, throttling).
RUN_FIELDS = [f for f in ENVIRONMENT_FIELDS if f != "timing_recipe"] + ["gpu_uuid", "power_limit_w"]
# What a point (one run's result of the case) must carry for attribution, beside those above.
POINT_FIELDS = ("code_digest", "kernel_config", *ENVIRONMENT_FIELDS, *MACHINE_FIELDS)


@dataclass(frozen=True)
class Change:
    """One recorded field that differs between the run before a step and the run at it."""

    part: str  # one of PARTS
    field: str  # for people: "torch", "GPU", "code", ...
    before: str
    after: str

    def text(self) -> str:
        return f"{self.field} {self.before} → {self.after}"


@dataclass(frozen=True)
class Attribution:
    label: str  # "code", "environment + machine", NONE, UNKNOWN
    changes: tuple[Change, ...] = ()

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(p for p in PARTS if any(c.part == p for c in self.changes))

    @property
    def has_code(self) -> bool:
        return "code" in self.parts

    def summary(self) -> str:
        """One line: the label, then what changed (from → to)."""
        if not self.changes:
            return self.label
        return f"{self.label}: " + "; ".join(c.text() for c in self.changes)

    def changes_json(self) -> str:
        return json.dumps([asdict(c) for c in self.changes])


def _shown(field: str, value) -> str:
    if value is None:
        return "—"
    text = str(value)
    if field in ("code_digest", "harness_digest") and len(text) > 12:
        return text[:12]
    return text


def _differs(before, after) -> bool:
    """Both recorded and different ("not recorded" is not a change)."""
    return before is not None and after is not None and before != after


def attribute(before: dict, after: dict) -> Attribution:
    """The attribution of a step between two points (dicts carrying POINT_FIELDS; see module doc)."""
    changes: list[Change] = []
    code_known = bool(before.get("code_digest")) and bool(after.get("code_digest"))
    if code_known and before["code_digest"] != after["code_digest"]:
        changes.append(
            Change(
                "code",
                "code",
                _shown("code_digest", before["code_digest"]),
                _shown("code_digest", after["code_digest"]),
            )
        )
    if _differs(before.get("kernel_config"), after.get("kernel_config")):
        changes.append(
            Change("configuration", "configuration", str(before["kernel_config"]), str(after["kernel_config"]))
        )
    for part, fields in (("environment", ENVIRONMENT_FIELDS), ("machine", MACHINE_FIELDS)):
        for name, label in fields.items():
            if _differs(before.get(name), after.get(name)):
                changes.append(Change(part, label, _shown(name, before[name]), _shown(name, after[name])))
    parts = [p for p in PARTS if any(c.part == p for c in changes)]
    if not code_known:
        return Attribution(UNKNOWN, tuple(changes))
    return Attribution(" + ".join(parts) if parts else NONE, tuple(changes))


def run_changes(before: dict, after: dict) -> tuple[Change, ...]:
    """The environment and machine changes between two runs' run-level fields (This push)."""
    return tuple(
        Change(part, label, _shown(name, before[name]), _shown(name, after[name]))
        for part, fields in (("environment", ENVIRONMENT_FIELDS), ("machine", MACHINE_FIELDS))
        for name, label in fields.items()
        if _differs(before.get(name), after.get(name))
    )


def moved_text(before: dict, after: dict, codes_before: dict, codes_after: dict) -> str:
    """What moved between two runs of one series, in one line (This push): the variants whose code
    fingerprint changed, then each environment and machine change (from → to). `before`/`after`:
    RUN_FIELDS of each run; `codes_*`: variant -> code digest ({}: no fingerprints recorded)."""
    if not codes_before or not codes_after:
        parts = ["code: unknown (no fingerprints recorded)"]
    else:
        changed = sorted(
            v
            for v in codes_before.keys() & codes_after.keys()
            if codes_before[v] and codes_after[v] and codes_before[v] != codes_after[v]
        )
        parts = [f"code of {', '.join(changed)}" if changed else "no variant's code"]
    return "; ".join(parts + [f"{c.part}: {c.text()}" for c in run_changes(before, after)])


def environment_epochs(runs: list[dict]) -> list[tuple[str, tuple[Change, ...]]]:
    """The runs (in commit order; dicts with `run_id` and ENVIRONMENT_FIELDS) at which the
    environment changed, each with its changes against the last value recorded before it: the
    epochs the charts mark. A field a run did not record neither starts nor ends an epoch."""
    last: dict[str, object] = {}
    epochs = []
    for run in runs:
        changes = []
        for name, label in ENVIRONMENT_FIELDS.items():
            value = run.get(name)
            if value is None:
                continue
            if name in last and last[name] != value:
                changes.append(Change("environment", label, _shown(name, last[name]), _shown(name, value)))
            last[name] = value
        if changes:
            epochs.append((run["run_id"], tuple(changes)))
    return epochs


def has_code_part(label: str | None) -> bool:
    """Whether a stored attribution label names the code (what bisect measures)."""
    return bool(label) and "code" in [p.strip() for p in str(label).split("+")]


def stored_changes(text: str | None) -> list[Change]:
    """An alert's attribution_changes column read back ([] for NULL or anything unreadable)."""
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return []
    return [
        Change(**{k: str(i.get(k, "")) for k in ("part", "field", "before", "after")})
        for i in items
        if isinstance(i, dict)
    ]
