"""From a tuning job's measurements (scripts/tune_triton.py) to entries of choices.toml.

Per named shape, dtype and causality: the candidates of configs.toml's bucket for the problem
that the job checked and timed, in the bucket's order, and the winner by the tuner's own rule
(kernels.triton.tuner.pick: the first within the tie margin of the fastest). The same rule as
the in-process tuner, applied once to a longer, interleaved measurement, and then kept.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from attnwatch.kernels.shapes import SHAPES
from attnwatch.kernels.triton.choices import (
    HEADER,
    Recorded,
    Tuning,
    load_choices,
    merged,
    problem_id,
    render_choices,
)
from attnwatch.kernels.triton.configs import load_table, runs_exactly
from attnwatch.kernels.triton.tuner import Trial, pick


def chosen_entries(result: dict, gpu: str) -> list[Recorded]:
    """One Recorded per timed case of a named shape whose bucket had a timed candidate."""
    table = load_table()
    entries = []
    for case in result["cases"]:
        shape = case["shape"]
        if shape["id"] not in SHAPES:
            continue  # the odd-length shapes exercise masks; runs never plan them
        variant, shape_id, dtype, causality = case["case"].split("/")[:4]
        causal = causality == "causal"
        bucket = table.bucket_for(shape["head_dim"], causal, shape["seq_len"])
        names = [
            n for n in (bucket.candidates if bucket else ()) if runs_exactly(table.configs[n], causal, shape["seq_len"])
        ]
        timed = [
            Trial(n, median_us=case["candidates"][n]["median_us"])
            for n in names
            if "median_us" in case["candidates"].get(n, {})
        ]
        if not timed:
            continue
        best = pick(timed, table.tie_margin)
        entries.append(
            Recorded(
                gpu=gpu,
                problem=problem_id(shape["batch"], shape["heads"], shape["seq_len"], shape["head_dim"]),
                dtype=dtype,
                causal=causal,
                config=best.config,
                trials_us={t.config: round(t.median_us, 2) for t in timed},
            )
        )
    return entries


def head_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_choices(path: Path, result: dict, *, rounds: int, commit: str | None, job: str) -> None:
    """Merge this job's entries into the table at `path` (this GPU's old block replaced)."""
    gpu = result["gpu"]
    table = load_table()
    tuning = Tuning(
        gpu=gpu,
        date=time.strftime("%Y-%m-%d", time.gmtime()),
        commit=commit or head_commit(),
        torch=result["torch"],
        triton=result["triton"],
        job=job,
        tie_margin=table.tie_margin,
        rounds=rounds,
    )
    new = chosen_entries(result, gpu)
    path.write_text(render_choices(merged(load_choices(path), tuning, new), HEADER))
    print(f"recorded {len(new)} choices for {gpu} in {path.name}")
