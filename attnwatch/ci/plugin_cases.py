"""The names of the gpu_benchmark fixture's cases (ci/pytest_plugin.py), and which test records each.

A case id is `<variant>/<shape>/<dtype>` (history.contract.names):

  - the variant is `name=` when the test gives one, else the test function's name without its
    `test_` prefix (`test_softmax_triton` -> `softmax_triton`): the series is the kernel's, not
    the test's. Files written before this rule name it with the prefix; a history holding those
    keeps them as a series of their own (the new one starts beside it);
  - a reference's variant is `reference_name=` when given, else the reference function's own
    name (`reference=softmax_torch` -> `softmax_torch`, `reference=torch.softmax` -> `softmax`),
    so one function is one series whether a test measures it or uses it as a reference; a
    function without a name of its own (a lambda, a partial) or with the test's variant name is
    `<variant>.reference`;
  - the shape is the test's parameter id (`default` without one); the dtype is `dtype=`, else
    the first tensor argument's.

A session records each case once (`Claims`): the function measured by a test of its own and used
as another test's reference is stored as the test's measurement, and a reference several tests
share is stored from the first of them; every test still keeps its gap to the reference it was
interleaved with (`timing.gap_to_baseline`). Two tests that would measure one case id are a
usage error of the second, before it measures anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

TEST_PREFIX = "test_"
_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


def series_name(text: str) -> str:
    """A series name (history.contract.names NAME) from pytest's: other characters become '-'."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "-", text).strip("-.+_")[:128]
    return name or "default"


def variant_name(given: str | None, test_name: str) -> str:
    """`name=`, else the test function's name without `test_`."""
    if given:
        return series_name(given)
    return series_name(test_name.removeprefix(TEST_PREFIX) or test_name)


def reference_name(given: str | None, reference: Callable[..., Any], variant: str) -> str:
    """`reference_name=`, else the reference function's name, else `<variant>.reference`."""
    if given:
        return series_name(given)
    own = getattr(reference, "__name__", None)
    if isinstance(own, str) and own.isidentifier():
        name = series_name(own)
        if name != variant:
            return name
    return f"{variant}.reference"


def dtype_of(args: tuple) -> str | None:
    """The first tensor argument's dtype, in the history's spelling (fp16, bf16, ...)."""
    for arg in args:
        dtype = getattr(arg, "dtype", None)
        if dtype is not None:
            text = str(dtype).removeprefix("torch.")
            return _DTYPES.get(text, text)
    return None


@dataclass
class _Claim:
    test: str  # the node id of the test that records the case
    block: dict | None  # the measurement block holding it as a reference; None: the test's own case


class Claims:
    """Which test records each case of this session (module docstring)."""

    def __init__(self) -> None:
        self._cases: dict[str, _Claim] = {}

    def claim(self, case_id: str, test: str) -> str | None:
        """Claim `case_id` as `test`'s own case, taking it from a reference that claimed it first.
        Returns the other test that already measured it as its own (nothing claimed), or None."""
        earlier = self._cases.get(case_id)
        if earlier is not None and earlier.block is None and earlier.test != test:
            return earlier.test
        if earlier is not None and earlier.block is not None:
            earlier.block.update(reference=None, reference_samples_us=[])
        self._cases[case_id] = _Claim(test, None)
        return None

    def keep_reference(self, block: dict, reference_id: str, test: str) -> None:
        """Claim the reference a measurement `block` holds where no test claimed it yet; else drop
        its timing from the block (the test's gap to it stays)."""
        if reference_id in self._cases:
            block.update(reference=None, reference_samples_us=[])
        else:
            self._cases[reference_id] = _Claim(test, block)
