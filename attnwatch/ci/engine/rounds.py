"""What each measurement call draws anew, so that it varies between the rounds of a compare.

A compare asks a warm worker for the same cases round after round (ci/compare/measure.py);
whatever a process keeps for its whole life is an offset no round varies and the rounds'
interval cannot see. So every call of `Engine.measure` (a compare round; a group of the run
child, measured once per process) takes:

* fresh inputs: seeds `timing_seed + SEED_STRIDE * round` (`round_seed`), never another round's;
* a new placement for the inputs and the L2-flush buffer (`spacer`): on the H200 the flush
  buffer's placement moved a 17 µs SDPA median by 0.45% (`scripts/flush_placement_check.py` at cd63d4e;
  the `fixed_flush` arm of `scripts/process_offset_check.py` asks the same across processes);
* a new pool of timing streams (ci/timing/timers.py, `CudaEventTimer.renew_streams`);
* launch choices tuned again where no recorded choice exists (`forget_tuned_choices`).
"""

from __future__ import annotations

import random
from typing import Any
from attnwatch.ci.kernels_api import kernels_api

SEED_STRIDE = 1000  # round r's inputs use seeds timing_seed + 1000*r + j: never another round's
SPACER_STEPS = 64  # before each group's inputs, a spacer of 0..63 x 256 KiB shifts their placement
SPACER_STEP_BYTES = 256 * 1024


def round_seed(timing_seed: int, round_index: int) -> int:
    return timing_seed + SEED_STRIDE * round_index


def spacer(device: Any, flusher: Any, timing_seed: int, round_index: int, group: str) -> Any:
    """Release cached device blocks and the flush buffer, hold a pseudo-random spacer and
    allocate the flush buffer after it (CUDA only; None elsewhere). Keep the returned tensor
    while the group's inputs are allocated: they and the buffer every timed call starts from
    then sit at a placement drawn for this round and group."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    flusher.release()
    torch.cuda.empty_cache()
    steps = random.Random(f"{timing_seed}/{round_index}/{group}").randrange(SPACER_STEPS)
    held = torch.empty(steps * SPACER_STEP_BYTES, dtype=torch.uint8, device=device) if steps else None
    flusher.allocate()
    return held


def forget_tuned_choices() -> None:
    """Make the process's kernels decide their launch choices again for this round.

    A recorded choice (kernels/triton/choices.toml) comes back the same on both sides, and so does
    a pick of the shared choice cache (kernels/triton/choice_cache.py) for a problem the table
    lacks, where both sides' kernel is unchanged; a revision's tuner without that cache re-tunes,
    so a near-tie that flips is round-to-round noise rather than a constant difference between
    the revisions (kernels/triton/tuner.py, `forget_choices`), asked through the side's harness
    API (ci/kernels_api.py)."""
    kernels_api().forget_tuned_choices()
