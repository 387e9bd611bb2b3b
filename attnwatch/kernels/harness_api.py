"""The harness API: what the measuring harness (ci/) may use of a revision's `kernels`, versioned
(docs/design.md, "The harness API").

Why it exists: `compare` measures the base revision's kernels with the head's harness. A
worker process imports the base checkout's `kernels` and this checkout's `ci` (ci/child_env.py),
so the names below are an interface between revisions: a harness written today calls them in
a `kernels` of months ago. Renaming `check_case` in kernels/ would break every compare whose
base predates the rename, unless the harness knows the old name. This module is that surface,
in one place, with a number saying which form of it a revision has.

The surface (everything a measuring process calls on the side's kernels; ci/kernels_api.py is
the harness's only way in there):

* `get(name)` -> `Variant` (KeyError for an unknown name), `register(variant)` (plugins);
  a `Variant`'s `name`, `family`, `build` (-> `BuildReport`), `unsupported(case)`,
  `prepare(case, device, seed)` -> `Prepared` (`fn`, `config`, `config_source`);
* `availability(variant)` -> (ok, reason); `capabilities()` (probe the machine once);
* `Case(variant, shape, dtype, causal)`, `case_id(variant, shape_id, dtype, causal)`,
  `Shape(id, batch, heads, seq_len, head_dim, source="")` with `flops(causal)` and
  `min_bytes(element)`;
* since version 2: `Case(variant, shape, dtype, mode=..., operator=...)` for any operator's case,
  `case_id(variant, shape_id, dtype, mode)` with a mode name, `get_operator(name)` ->
  `Operator` (kernels/operators.py: `flops`, `bytes`, `modes`, `baseline`, `references`), and
  `SHAPES` (every named shape by id, of any operator); a revision before version 2 has attention
  only, and the harness reaches it through the names above;
* `check_case(variant, case, device, seeds)` -> list of `CheckResult` (ci/records.py reads
  every field by name and refuses one it does not know);
* `forget_tuned_choices()`: make in-process autotuners decide again (each compare round);
* the environment variable `CUTLASS_INCLUDE_DIR`, honoured as where the CUTLASS headers are
  (the harness passes the head's to both sides: a worktree of the base has none).

Version rule. `HARNESS_API_VERSION` is an int literal: compare reads it from the base's file
without importing it (ci/kernels_api.py, `declared_version`), and refuses a base it cannot
measure before anything is written. Bump it when a change here would break a harness written
against the previous version (a name renamed or removed, a signature, a result's fields or
their meaning) or when the harness starts to rely on something older revisions lack; then
teach ci/kernels_api.py the new version and either keep an adapter for the old one or raise
its oldest supported version. A revision without this module is version 0: the same names,
found module by module (kernels.registry, kernels.availability, kernels.cases, kernels.shapes,
kernels.correctness, kernels.triton.tuner), as every commit before the module had them.
"""

from __future__ import annotations

import sys

from .availability import availability, capabilities
from .build_report import BuildReport
from .cases import Case, case_id
from .correctness import CheckResult, check_case
from .operators import Operator, get_operator
from .registry import get, register
from .shapes import SHAPES, Shape
from .variant import Prepared, Variant

HARNESS_API_VERSION = 2

__all__ = [
    "HARNESS_API_VERSION",
    "SHAPES",
    "BuildReport",
    "Case",
    "CheckResult",
    "Operator",
    "Prepared",
    "Shape",
    "Variant",
    "availability",
    "capabilities",
    "case_id",
    "check_case",
    "forget_tuned_choices",
    "get",
    "get_operator",
    "register",
]


def forget_tuned_choices() -> None:
    """Drop the launch choices an autotuner made in this process (kernels.triton.tuner), so the
    next preparation of each problem decides again. A tuner not imported yet has chosen nothing,
    and is not imported for this (it needs Triton)."""
    tuner = sys.modules.get(f"{__package__}.triton.tuner")
    forget = getattr(tuner, "forget_choices", None)
    if forget is not None:
        forget()
