"""Does where the L2 flush buffer sits in device memory shift a kernel's measured median?

    PYTHONPATH=. python3 scripts/flush_placement_check.py [--buffers 4] [--reps 10] [--calls 200] [--out DIR]

Why (issue 11): in the A/A compares on the H200 (2026-11-23, commits 2b32cb7 and 034386f) the
head worker's per-round medians sat above the base worker's by an offset shared by most of the
68 cases (+0.3% on average in two of the four compares, large and small cases alike), which
the rounds inside the two workers did not vary: a paired t-test over each case's rounds gave
p < 0.05 for 24% of the cases instead of 5%. A compare's interval is built from its rounds, so a
per-process offset is a bias it cannot see. One thing every case of a worker shares and no round
changes is the flush buffer: the timed call always starts with L2 full of that buffer's
freshly written (dirty) lines, whose physical placement is fixed per process.

Method: `--buffers` flush buffers (4 x L2 each, as the harness flushes) are held at once, a
spacer between them; for each subject, `--reps` repetitions each time `--calls` calls with every
buffer, buffers in a new shuffled order per repetition, with the harness's own warm-up, guard
and sampler (ci.timing.sampler). Per subject, a one-way analysis of variance of the log medians
across buffers (Fisher's F: the between-buffer mean square over the within-buffer one, with
K-1 and K(R-1) degrees of freedom) says whether the buffer's placement moves the median beyond
repetition noise, and the spread of the buffer means says by how much.

Writes flush_placement.json under --out (default $OUT) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SUBJECTS = {  # (batch, heads, seq_len, head_dim, causal): the pr set's shapes, the sizes whose offsets matter
    "sdpa/h100_small/causal": (1, 16, 1024, 64, True),
    "sdpa/h100_small/noncausal": (1, 16, 1024, 64, False),
    "sdpa/b4_h16_s1k/causal": (4, 16, 1024, 64, True),
    "matmul_4096": None,
}


def make_subject(name: str):
    import torch

    spec = SUBJECTS[name]
    if spec is None:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        return lambda: a @ b
    batch, heads, seq, dim, causal = spec
    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buffers", type=int, default=4)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import torch

    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NullMonitor
    from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher
    from attnwatch.history.analysis.statistics import one_way_anova

    device = torch.device("cuda")
    config = timing_config("cuda").with_overrides(
        min_samples=args.calls, max_samples=args.calls, time_cap_s=60.0, target_rel_spread=-1.0
    )
    nbytes = int(config.flush_l2_multiple * torch.cuda.get_device_properties(device).L2_cache_size)
    flushers, spacers = [], []
    for i in range(args.buffers):
        spacers.append(torch.empty((i * 7 + 3) * 256 * 1024, dtype=torch.uint8, device=device))
        flushers.append(L2Flusher(device, nbytes))
    timer = CudaEventTimer(config.block_calls)
    rng = random.Random(7)
    rows = []
    for name in SUBJECTS:
        fn = make_subject(name)
        warm_up(fn, config, timer, flushers[0])
        medians: list[list[float]] = [[] for _ in flushers]
        for _ in range(args.reps):
            order = list(range(len(flushers)))
            rng.shuffle(order)
            for k in order:
                raw = measure_interleaved([Subject(name, fn)], config, timer, flushers[k], NullMonitor())[name]
                medians[k].append(statistics.median(raw.samples_us))
        logs = [[math.log(m) for m in ms] for ms in medians]
        anova = one_way_anova(logs)
        f, df1, df2 = anova.f, anova.df_between, anova.df_within
        means = [statistics.fmean(g) for g in logs]
        rows.append(
            {
                "subject": name,
                "median_us": statistics.median([m for ms in medians for m in ms]),
                "buffer_medians_us": [statistics.median(ms) for ms in medians],
                "buffer_spread_pct": 100 * (math.exp(max(means) - min(means)) - 1),
                "rep_sd_pct": 100 * anova.within_sd,
                "F": f,
                "df": [df1, df2],
                "p": anova.p_value(),
                "medians_us": medians,
            }
        )
    out = Path(args.out or os.environ.get("OUT") or "out/flush_placement")
    out.mkdir(parents=True, exist_ok=True)
    (out / "flush_placement.json").write_text(
        json.dumps(
            {
                "gpu": torch.cuda.get_device_name(device),
                "buffers": args.buffers,
                "reps": args.reps,
                "calls": args.calls,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"{'subject':<28} {'median us':>10} {'buffer spread':>14} {'rep sd':>8} {'F':>7}  p")
    for r in rows:
        p_text = f"{r['p']:.3g}" if r["p"] is not None else "n/a"
        print(
            f"{r['subject']:<28} {r['median_us']:>10.2f} {r['buffer_spread_pct']:>13.2f}% {r['rep_sd_pct']:>7.2f}% "
            f"{r['F']:>7.2f}  {p_text} (df {r['df'][0]}, {r['df'][1]})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
