"""Where a compare round's warm-up goes, call by call, on a GPU (issue 43).

A compare's cost lines name the warm-up of each variant (`warm-up by variant`): on an H100 the
reference `sdpa` took 1.1-1.4 s a side, 70-90 ms a case-round for 5 calls of about 0.1 ms, where
`cuda_wmma` took 0.01-0.02 s (docs/benchmarks/compare.md, "The verdict while you wait"). This
probe repeats what a round does before its timed calls (ci/engine/rounds.py and group.py): per
interleave group, the flush buffer released, `torch.cuda.empty_cache()`, a spacer of drawn
size, the flush buffer allocated anew; then for each variant its inputs prepared and its 5
warm-up calls, each with an L2 flush first, each synchronised and timed alone. Two arms: `round`
(as the engine does) and `kept` (the same without `empty_cache` and the new placement), so a
cost that follows the release of cached blocks shows as the difference.

    PYTHONPATH=. python3 scripts/warmup_probe.py --rounds 4 --out $OUT

Prints, per arm and variant, the median prepare time and the median time of each warm-up call
(ms); writes every figure to warmup_probe.json under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

VARIANTS = ("sdpa", "cuda_wmma", "cuda_wmma_cpasync", "torch_3op")
WARMUP_CALLS = 5


def timed_ms(fn) -> float:
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - started)


def probe(arm: str, rounds: int, variants: list, groups: list, device) -> dict[str, dict[str, list[float]]]:
    """{variant: {"prepare": [...], "call0": [...], ...}} in ms over every round and group."""
    import torch

    from attnwatch.ci.engine.rounds import round_seed, spacer
    from attnwatch.ci.timing.timers import L2Flusher
    from attnwatch.kernels.cases import Case

    flusher = L2Flusher(device, 2 * torch.cuda.get_device_properties(device).L2_cache_size)
    figures: dict[str, dict[str, list[float]]] = {v.name: {} for v in variants}
    for round_index in range(rounds):
        for shape, causal in groups:
            # the engine's own round set-up (ci/engine/rounds.py), or none: the buffer stays put
            held = spacer(device, flusher, 0, round_index, f"{shape.id}/{causal}") if arm == "round" else None
            for variant in variants:
                case = Case(variant.name, shape, "fp16", causal=causal)
                if variant.unsupported(case):
                    continue
                seed = round_seed(0, round_index)  # a round's inputs, as the engine seeds them
                started = time.perf_counter()
                prepared = variant.prepare(case, device, seed)
                into = figures[variant.name]
                into.setdefault("prepare", []).append(1000 * (time.perf_counter() - started))
                for k in range(WARMUP_CALLS):
                    into.setdefault(f"call{k}", []).append(timed_ms(lambda: (flusher.flush(), prepared.fn())))
            del held
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--out", default="warmup-probe-out")
    args = p.parse_args(argv)
    import torch

    from attnwatch.kernels.registry import get
    from attnwatch.kernels.shapes import Shape, shape_set

    if not torch.cuda.is_available():
        print("warmup_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    variants = [get(name) for name in VARIANTS]
    for variant in variants:
        if variant.build is not None:
            variant.build()
    groups = [(shape, causal) for shape in shape_set("pr", Shape) for causal in (True, False)]
    report = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": args.rounds, "arms": {}}
    for arm in ("round", "kept", "round"):  # the engine's arm twice, around the other
        key = arm if arm not in report["arms"] else f"{arm}_again"
        report["arms"][key] = probe(arm, args.rounds, variants, groups, device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "warmup_probe.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{'arm':<12} {'variant':<18} {'prepare':>8} " + " ".join(f"{f'call{k}':>7}" for k in range(WARMUP_CALLS)))
    for arm, by_variant in report["arms"].items():
        for name, series in by_variant.items():
            cells = [f"{statistics.median(series['prepare']):8.2f}" if "prepare" in series else f"{'-':>8}"]
            cells += [
                f"{statistics.median(series[f'call{k}']):7.2f}" for k in range(WARMUP_CALLS) if f"call{k}" in series
            ]
            print(f"{arm:<12} {name:<18} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
