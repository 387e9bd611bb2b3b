"""The run plan: which cases a measuring child must run, and how; written as JSON for the child.

The parent (no CUDA) builds the plan from the registry and the named shapes; the child
(`ci/suites`) reads it. Cases are plain records (no kernels objects) so that a plan can name
variants that exist only in another checkout (`compare` measures a merge base that way).
Cases are ordered by interleave group (shape, dtype, mode) so that a group's tests run
together, with the operator's baseline (kernels.operators: attention's is `sdpa`) first in each
group. The plan names each operator's baseline and references, so the child (and both sides of
a compare, whatever the base's registry says) takes every gap against the variants the parent's
registry chose.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from attnwatch.ci.kernels_api import kernels_api
from attnwatch.ci.run_config import configured
from attnwatch.history.contract.bundle import CaseKey

if TYPE_CHECKING:
    from attnwatch.kernels.cases import Case

PLAN_SCHEMA = "attnwatch.plan"


@dataclass(frozen=True)
class PlannedCase(CaseKey):
    """A case to run: the bundle's CaseKey (what its records will be about), with what ci needs:
    its operator and mode (kernels.operators). An attention case's mode is its causal flag's
    name; another operator's case keeps 1 in the four attention dimensions and is found by its
    shape id in the side's kernels (harness API 2: `SHAPES`)."""

    operator: str = "attention"
    mode: str = ""

    def __post_init__(self) -> None:
        if self.operator == "attention":
            object.__setattr__(self, "mode", "causal" if self.causal else "noncausal")

    @property
    def attention(self) -> bool:
        return self.operator == "attention"

    @property
    def case_id(self) -> str:
        # An attention case is named as every harness API version names it (a causal flag).
        return kernels_api().case_id(
            self.variant, self.shape_id, self.dtype, self.causal if self.attention else self.mode
        )

    @property
    def group(self) -> str:
        """Interleave group: the cases timed round-robin together."""
        return f"{self.shape_id}/{self.dtype}/{self.mode}"

    def shape(self) -> Any:
        """The kernels-side shape (of this process's kernels: another revision's in a compare worker)."""
        if self.attention:
            return kernels_api().Shape(self.shape_id, self.batch, self.heads, self.seq_len, self.head_dim)
        return kernels_api().SHAPES[self.shape_id]

    def to_case(self) -> Case:
        """The kernels-side case (for code that prepares and runs it in this process)."""
        if self.attention:
            return kernels_api().Case(self.variant, self.shape(), self.dtype, self.causal)
        return kernels_api().Case(self.variant, self.shape(), self.dtype, mode=self.mode, operator=self.operator)

    def _declared(self) -> Any:
        """The case's Operator in the side's kernels (kernels.operators); None in a revision before
        harness API 2, which has attention only and its models on `Shape`."""
        get_operator = getattr(kernels_api(), "get_operator", None)
        return get_operator(self.operator) if get_operator is not None else None

    @property
    def flops(self) -> float:
        """The operator's FLOP model: the one definition of a case's FLOPs."""
        op = self._declared()
        return op.flops(self.shape(), self.mode) if op else self.shape().flops(self.causal)

    @property
    def bound(self) -> str:
        """What the operator's roofline plots against: "compute" or "memory"."""
        op = self._declared()
        return op.bound if op else "compute"

    @property
    def bytes(self) -> float:
        """The operator's byte model: the fewest DRAM bytes one call must move."""
        op = self._declared()
        if op is None:  # attention before harness API 2: Q, K, V and O once each
            return float(self.shape().min_bytes(4 if self.dtype == "fp32" else 2))
        return float(op.bytes(self.shape(), self.dtype, self.mode))

    @classmethod
    def of(cls, variant: str, shape: Any, dtype: str, mode: str | bool, operator: str = "attention") -> "PlannedCase":
        """The case of `variant` on `shape`; `mode` a mode name, or attention's causal flag."""
        if operator == "attention":
            causal = mode if isinstance(mode, bool) else mode == "causal"
            return cls(variant, shape.id, shape.batch, shape.heads, shape.seq_len, shape.head_dim, dtype, causal)
        return cls(variant, shape.id, 1, 1, 1, 1, dtype, False, operator=operator, mode=str(mode))


def reference_variant() -> str:
    """Attention's baseline (kernels.registry.reference): its gaps' denominator."""
    from attnwatch.kernels.registry import reference

    return reference().name


def operator_baselines() -> dict[str, str]:
    """Each operator with a registered variant -> its baseline (kernels.registry.baseline, which
    refuses one that is not a registered variant of the operator)."""
    from attnwatch.kernels import registry

    operators = dict.fromkeys(v.operator for v in registry.all_variants())
    return {op: registry.baseline(op).name for op in operators}


def operator_references() -> dict[str, list[str]]:
    """Each operator with a registered variant -> the references a kernel team compares it with."""
    from attnwatch.kernels import registry
    from attnwatch.kernels.operators import get_operator

    operators = dict.fromkeys(v.operator for v in registry.all_variants())
    return {op: list(get_operator(op).references) for op in operators}


def _operator_of(variant: str) -> str:
    """The variant's operator in this process's registry; attention for a variant registered only
    where it runs (a module the child loads, a compare side's own variant)."""
    from attnwatch.kernels import registry

    try:
        return registry.get(variant).operator
    except KeyError:
        return "attention"


def plan_cases(
    variants: Iterable[str], shapes: Iterable[Any], dtypes: Iterable[str], causal_modes: Iterable[bool]
) -> list[PlannedCase]:
    """Every (variant, shape, dtype, mode) of each variant's operator, grouped, the operator's
    baseline first in each group. A variant runs only on shapes of its operator's shape type;
    `causal_modes` chooses attention's modes, another operator runs in all of its own."""
    from attnwatch.kernels.operators import get_operator, operator_of_shape

    variants = list(dict.fromkeys(variants))
    causal_modes = list(causal_modes)
    operator_of = {v: _operator_of(v) for v in variants}
    baselines = {op: get_operator(op).baseline for op in set(operator_of.values())}
    ordered = sorted(variants, key=lambda v: (v != baselines[operator_of[v]], variants.index(v)))
    planned = []
    for shape in shapes:
        op = operator_of_shape(shape)
        if op is None:
            continue
        modes: list[Any] = causal_modes if op.name == "attention" else list(op.modes)
        for dtype in dtypes:
            for mode in modes:
                planned += [
                    PlannedCase.of(v, shape, dtype, mode, op.name) for v in ordered if operator_of[v] == op.name
                ]
    return planned


@dataclass
class RunPlan:
    """Everything the child needs; `timing` is a TimingConfig as a dict."""

    cases: list[PlannedCase]
    timing: dict[str, Any]
    device_kind: str  # "cuda" or "cpu": the child refuses to fall back silently
    correctness: bool = True
    correctness_seeds: list[int] = configured("correctness_seeds")
    timing_seed: int = configured("timing_seed")
    build: bool = True
    reference: str = field(default_factory=reference_variant)  # attention's baseline (kernels.registry.reference)
    # Each operator's baseline (every gap_to_baseline's denominator) and references
    # (gap_to_fastest_reference), as the parent's registry declares them: both sides of a compare
    # take the gaps against the head's choice.
    baselines: dict[str, str] = field(default_factory=operator_baselines)
    references: dict[str, list[str]] = field(default_factory=operator_references)
    # Modules the child imports before resolving variants: extra variants registered outside
    # the built-in registry (the test suite's deliberately failing variants).
    extra_variant_modules: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        data = asdict(self)
        data["schema"] = PLAN_SCHEMA
        return json.dumps(data, indent=1)

    def save(self, path: Path) -> Path:
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> "RunPlan":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.pop("schema", None) != PLAN_SCHEMA:
            raise ValueError(f"{path}: not an attnwatch plan")
        data["cases"] = [PlannedCase(**c) for c in data["cases"]]
        return cls(**data)

    def with_cases(self, cases: list[PlannedCase]) -> "RunPlan":
        return RunPlan(**{**self.__dict__, "cases": list(cases)})
