"""Pick the block configuration of the Triton FA2 forward for one problem.

On a GPU the configuration recorded for this GPU model and problem (choices.toml, written by
an explicit tuning job: kernels/triton/choices.py) is used as it is: every process, every
side of a compare, the same. Only a problem the table lacks is tuned here, and its Choice says
so (`source` "tuned"), so that a stored result shows it ran on a per-process pick.

Tuning in the process: the candidates come from `configs.toml` (per head dim / causal /
sequence-length bucket). On a GPU each candidate is compiled, run once, and timed with CUDA events (median of several calls,
L2 flushed before each by `triton.testing.do_bench`); the fastest wins, near-ties going to the
candidate listed first (`pick`). A candidate that fails
to compile or launch (too much shared memory, an option this Triton lacks) is recorded with its
error and skipped, never fatal unless all fail. Under the CPU interpreter nothing is timed: the
first interpreter candidate is used.

Choices are cached per exact problem (B, H, S, D, causal, dtype, device) for the process, so a
suite that prepares the same case for several seeds tunes once, and a tuned pick is kept between
processes (kernels/triton/choice_cache.py, keyed by GPU model, kernel fingerprint, Triton version
and problem): the first process to tune a problem stores it and every later process and run
reads it back (source "cached"); `ATTNWATCH_TRITON_RETUNE=1` tunes again and replaces it. The whole trial list is
returned so that a run records not just the winner but what it beat, and by how much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import choice_cache
from .choices import ChoiceTable, load_choices, problem_id
from .configs import BlockConfig, ConfigTable, load_table, runs_exactly
from .fa2_fwd import make_launcher

# Timing budget per candidate (milliseconds of do_bench warm-up and measurement): enough for a
# stable median at these sizes (tens of calls even at 1 ms per call) without making a suite slow.
WARMUP_MS = 5
REP_MS = 25


@dataclass
class Trial:
    config: str
    median_us: float | None = None
    error: str | None = None


# Where a Choice came from (stored with every result as kernel_config_source):
SOURCES = {
    "table": "recorded for this GPU model and problem in choices.toml",
    "tuned": "timed in this process: the table has no entry for this GPU and problem",
    "cached": "tuned once by an earlier process on this GPU model, kernel and Triton version, read from the "
    "shared choice cache (kernels/triton/choice_cache.py)",
    "fixed": "the only candidate (or the interpreter's): nothing to choose",
}


@dataclass
class Choice:
    config: BlockConfig
    tuned: bool  # timed in this process (source "tuned")
    trials: list[Trial] = field(default_factory=list)
    source: str = "fixed"  # a key of SOURCES

    def as_record(self) -> dict:
        return {
            **self.config.as_record(),
            "tuned": self.tuned,
            "source": self.source,
            "trials": [t.__dict__ for t in self.trials],
        }


_CACHE: dict[tuple, Choice] = {}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def candidates_for(table: ConfigTable, q, causal: bool) -> list[BlockConfig]:
    _, _, seq_len, head_dim = q.shape
    found = table.candidates(head_dim, causal, seq_len, interpreter=interpreting())
    if not found:
        raise ValueError(
            f"triton_fa2: no block configuration in configs.toml runs head_dim="
            f"{head_dim} causal={causal} seq_len={seq_len} exactly"
        )
    return found


def forget_choices() -> None:
    """Drop this process's choices: the next `choose` of each problem decides again.

    A recorded choice (choices.toml) comes back the same, so both sides of a compare run the
    same configuration every round. For a problem the table lacks, the next `choose` reads the
    shared choice cache (kernels/triton/choice_cache.py): where two candidates are near a tie,
    the fastest differs between processes (on the H200, 2026-11-23, a warm worker per side read
    triton_fa2 5% apart in A/A compares: 0.945, 1.050, 1.047), so both sides of a compare whose
    kernel is unchanged run the one pick stored for that problem, in every round; it is tuned
    (and stored) only where no trusted entry exists."""
    _CACHE.clear()


def dtype_name(q) -> str:
    """The case dtype name of a tensor ("fp16", "bf16"; anything else as torch names it)."""
    name = str(q.dtype).removeprefix("torch.")
    return {"float16": "fp16", "bfloat16": "bf16"}.get(name, name)


def device_name(q) -> str | None:
    """The GPU model the tensor lives on, as CUDA names it (the bundle's gpu_name)."""
    if not q.is_cuda:
        return None
    import torch

    return torch.cuda.get_device_name(q.device)


def recorded(q, causal: bool, table: ConfigTable, choices: ChoiceTable, gpu: str | None) -> BlockConfig | None:
    """The configuration choices.toml records for this GPU model and problem, if it runs it exactly."""
    if gpu is None:
        return None
    b, h, s, d = q.shape
    entry = choices.lookup(gpu, problem_id(b, h, s, d), dtype_name(q), causal)
    if entry is None:
        return None
    config = table.configs[entry.config]
    if not runs_exactly(config, causal, s):
        raise ValueError(
            f"choices.toml: {entry.problem}/{entry.dtype} records {config.name!r}, which cannot run S={s} exactly"
        )
    return config


def choose(
    q,
    k,
    v,
    out,
    causal: bool,
    table: ConfigTable | None = None,
    choices: ChoiceTable | None = None,
    gpu: str | None = None,
) -> Choice:
    """The configuration to run this problem with: the recorded one where choices.toml has
    it, else tuned on the device (cached per problem for the process). `gpu` defaults to the
    model of q's device (tests name one)."""
    table = table or load_table()
    gpu = gpu or device_name(q)
    key = (tuple(q.shape), bool(causal), str(q.dtype), str(q.device), gpu, interpreting())
    if key in _CACHE:
        return _CACHE[key]
    fixed = None if interpreting() else recorded(q, causal, table, choices or load_choices(), gpu)
    if fixed is not None:
        choice = Choice(fixed, tuned=False, source="table")
    else:
        found = candidates_for(table, q, causal)
        if interpreting() or len(found) == 1:
            choice = Choice(found[0], tuned=False, source="fixed")
        else:
            choice = shared_choice(q, k, v, out, causal, found, table, gpu)
    _CACHE[key] = choice
    return choice


def shared_choice(q, k, v, out, causal: bool, found: list[BlockConfig], table: ConfigTable, gpu: str | None) -> Choice:
    """A problem the table lacks: the shared cache's pick where it holds a trusted one (source
    "cached"), else timed here and stored for every later process (source "tuned"). With no GPU
    model to key by, timed and not shared."""
    if gpu is None:
        return time_candidates(q, k, v, out, causal, found, table.tie_margin)
    b, h, s, d = q.shape
    key = choice_cache.choice_key(gpu, problem_id(b, h, s, d), dtype_name(q), causal)
    retune = choice_cache.retune_requested()
    entry = None if retune else choice_cache.load(key, table, s)
    if entry is not None:
        return Choice(table.configs[entry["config"]], tuned=False, source="cached")
    choice = time_candidates(q, k, v, out, causal, found, table.tie_margin)
    trials = [t.__dict__ for t in choice.trials]
    if retune:
        choice_cache.replace(key, choice.config.name, trials)
        return choice
    choice_cache.store(key, choice.config.name, trials)
    stood = choice_cache.load(key, table, s)
    if stood is not None and stood["config"] != choice.config.name:
        # another process stored its pick first: run that one, as every later process will
        return Choice(table.configs[stood["config"]], tuned=False, trials=choice.trials, source="cached")
    return choice


def time_candidates(q, k, v, out, causal: bool, found: list[BlockConfig], tie_margin: float) -> Choice:
    """Time every candidate on this problem; the winner is `pick`ed from the medians."""
    from triton.testing import do_bench

    trials = []
    for config in found:
        try:
            run = make_launcher(q, k, v, out, causal, config)
            run()  # compile outside the timing
            median_ms = do_bench(run, warmup=WARMUP_MS, rep=REP_MS, return_mode="median")
            trials.append(Trial(config.name, median_us=median_ms * 1e3))
        except Exception as exc:  # a candidate that cannot build or launch is a recorded miss
            trials.append(Trial(config.name, error=f"{type(exc).__name__}: {str(exc)[:300]}"))
    best = pick(trials, tie_margin)
    by_name = {c.name: c for c in found}
    return Choice(by_name[best.config], tuned=True, trials=trials, source="tuned")


def pick(trials: list[Trial], tie_margin: float) -> Trial:
    """The winner among timed trials, listed in the bucket's order of preference: the first
    trial within `tie_margin` of the fastest median. Near-ties thus resolve to the same
    configuration in every run instead of following the noise (two H200 sweeps of the same
    configs agreed within 0.9% median, 3% at p90), so a recorded series does not step when
    the choice flips between equals."""
    timed = [(t.median_us, t) for t in trials if t.median_us is not None]
    if not timed:
        details = "; ".join(f"{t.config}: {t.error}" for t in trials)
        raise RuntimeError(f"triton_fa2: every candidate configuration failed ({details})")
    fastest = min(median for median, _ in timed)
    return next(t for median, t in timed if median <= fastest * (1.0 + tie_margin))
