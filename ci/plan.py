"""The run plan: which cases a measuring child must run, and how; written as JSON for the child.

The parent (no CUDA) builds the plan from the registry and the named shapes; the child
(`ci/suites`) reads it. Cases are plain records (no kernels objects) so that a plan can name
variants that exist only in another checkout (`compare` measures a merge base that way).
Cases are ordered by interleave group (shape, dtype, causal) so that a group's tests run
together, with the reference variant (the registry's `is_reference`, `sdpa`) first in each
group. The plan names that reference, so the child (and both sides of a compare, whatever the
base's registry says) takes every gap against the variant the parent's registry chose.
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
    from attnwatch.kernels.shapes import Shape

PLAN_SCHEMA = "attnwatch.plan"


@dataclass(frozen=True)
class PlannedCase(CaseKey):
    """A case to run: the bundle's CaseKey (what its records will be about), with what ci needs."""

    @property
    def case_id(self) -> str:
        return kernels_api().case_id(self.variant, self.shape_id, self.dtype, self.causal)

    @property
    def group(self) -> str:
        """Interleave group: the cases timed round-robin together."""
        return f"{self.shape_id}/{self.dtype}/{'causal' if self.causal else 'noncausal'}"

    def shape(self) -> Shape:
        """The kernels-side shape (of this process's kernels: another revision's in a compare worker)."""
        return kernels_api().Shape(self.shape_id, self.batch, self.heads, self.seq_len, self.head_dim)

    def to_case(self) -> Case:
        """The kernels-side case (for code that prepares and runs it in this process)."""
        return kernels_api().Case(self.variant, self.shape(), self.dtype, self.causal)

    @property
    def flops(self) -> float:
        """kernels.shapes.Shape.flops: the one definition of a case's FLOPs."""
        return self.shape().flops(self.causal)

    @classmethod
    def of(cls, variant: str, shape: Shape, dtype: str, causal: bool) -> "PlannedCase":
        return cls(variant, shape.id, shape.batch, shape.heads, shape.seq_len, shape.head_dim, dtype, causal)


def reference_variant() -> str:
    """The registry's reference variant (kernels.registry.reference): the gaps' denominator."""
    from attnwatch.kernels.registry import reference

    return reference().name


def plan_cases(variants: Iterable[str], shapes: Iterable[Shape], dtypes: Iterable[str], causal_modes: Iterable[bool]) -> list[PlannedCase]:
    """Every (variant, shape, dtype, causal), grouped, the reference variant first in each group."""
    variants = list(dict.fromkeys(variants))
    first = reference_variant()
    ordered = sorted(variants, key=lambda v: (v != first, variants.index(v)))
    return [
        PlannedCase.of(v, shape, dtype, causal)
        for shape in shapes
        for dtype in dtypes
        for causal in causal_modes
        for v in ordered
    ]


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
    reference: str = field(default_factory=reference_variant)  # every gap's denominator (kernels.registry.reference)
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
