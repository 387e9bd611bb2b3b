"""The events a measuring process sends while it works: one vocabulary for the journal and the pipe.

The engine (ci/engine/group.py) calls `emit(kind, **fields)`; the run child writes each event
as a journal line (ci/journal.py) and the compare worker as a pipe message
(ci/workers/protocol.py), both as `{"kind": kind, **fields}`. The parents read them with the
same names: ci/suite_state.py and ci/progress.py (the run), ci/workers/client.py and
ci/compare/side.py (the compare).

Engine events:

* `build_begin` {variant}; `build` {record (history.contract.bundle.BuildRecord as a dict), wall_s};
* `begin` {case, stage[, group]}: the case and stage now in flight (`group` with `timing`);
* `beat` {case, stage}: one per timed block, so a parent can tell a slow case from a hung one;
* `correctness` {case, records}: the records of a check, the moment it finished;
* `result` {case, status, error, timing, samples_us, clocks_mhz (each sample's SM clock, with a clock record), converged, throttled_samples,
  graph_note}: a case's measurement in this call (status ok, failed, skipped, unsupported;
  `timing` is the CaseTiming dict with its gaps, None unless ok);
* `fault` {case, stage, error[, variant]}: the CUDA context is poisoned; the process exits
  with CRASH_EXIT_CODE right after (`variant` and case None when a build poisoned it).

What only one channel carries is its harness's, not the engine's: the run child's `session`,
`bench` (pytest-benchmark's entry), `outcome` (a case's final status, after host timing) and
`note`; the compare worker's `hello`, `ready`, `done`, `probe_result` and `error`.
"""

from __future__ import annotations

from typing import Any, Protocol

CRASH_EXIT_CODE = 70  # a fault was sent and the process exited on purpose (EX_SOFTWARE)

# The stages of a case, in the order they run. `placement` is a group's round set-up (the spacer
# and flush buffer of ci/engine/rounds.py), announced under the group's first case: timed as a
# stage so that a compare's cost lines name it. `host_timing` is the run child's
# pytest-benchmark pass; the isolated re-run (`Engine.probe`) replays it too.
STAGES = ("placement", "correctness", "prepare", "warmup", "timing", "graph", "host_timing")
# The stages whose seconds are also counted per variant, under `variant_stage_key` ("warmup:sdpa"),
# beside the stage's total in a worker's `done`: a compare's cost lines say which kernel a side's
# warm-up went to (ci/compare/side.py). A stage of one case alone could be added; none other is read.
BY_VARIANT_STAGES = ("warmup",)


def variant_stage_key(stage: str, case_id: str) -> str:
    """The key of a stage's seconds by variant: "<stage>:<variant>" (a case id's first part)."""
    return f"{stage}:{case_id.split('/', 1)[0]}"


def by_variant(seconds: dict[str, float], stage: str) -> dict[str, float]:
    """variant -> seconds of `stage` (one of BY_VARIANT_STAGES) from a worker's stage seconds."""
    prefix = f"{stage}:"
    return {key[len(prefix) :]: value for key, value in seconds.items() if key.startswith(prefix)}


class Emit(Protocol):
    def __call__(self, kind: str, **fields: Any) -> None: ...
