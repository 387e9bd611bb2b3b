"""`attnwatch variants [--json] [--shapes SET]`: every registered variant of every operator
(attention, RMSNorm, ...) and whether it runs here.

Lists name, operator (each row names its own), family, lineage (the seeds' name for it),
whether it is its operator's baseline (kernels/operators.py), what it needs, and its
availability on this machine with the reason when it is unavailable, under a one-line
description of the device. With `--shapes`, also which cases of that shape set (its operator's
shapes x fp16/bf16 x the operator's modes) each variant would skip, and why, before any GPU
time is spent.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

from attnwatch.ci.errors import UserError
from attnwatch.kernels.availability import availability, capabilities, device_summary, skip_reason
from attnwatch.kernels.cases import DTYPES, Case
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.registry import all_variants, get
from attnwatch.kernels.shapes import SHAPE_SETS, shape_set


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "variants",
        help="list the kernel variants of every operator and whether each runs on this machine",
        description="List every registered variant of every operator (attention, RMSNorm, ...) with its operator, "
        "family, lineage, needs and availability here.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument(
        "--shapes",
        metavar="SET",
        default=None,
        help=f"also list the cases of this shape set that each variant skips here ({', '.join(SHAPE_SETS)})",
    )
    p.set_defaults(func=_run)


def variant_rows() -> list[dict]:
    rows = []
    for variant in all_variants():
        ok, reason = availability(variant)
        rows.append(
            {
                "name": variant.name,
                "family": variant.family,
                "lineage": variant.lineage,
                "description": variant.description,
                "operator": variant.operator,
                "is_baseline": get_operator(variant.operator).baseline == variant.name,
                "needs": sorted(variant.needs),
                "available": ok,
                "reason": reason or None,
            }
        )
    return rows


def case_skips(set_name: str) -> dict[str, dict[str, str]]:
    """variant -> {case id: skip reason} over the set's shapes of the variant's operator x DTYPES x
    the operator's modes, on this machine."""
    try:
        shapes = shape_set(set_name)
    except KeyError as exc:
        raise UserError(f"--shapes: {exc.args[0]}") from None
    skips: dict[str, dict[str, str]] = {}
    for variant in all_variants():
        skipped = {}
        op = get_operator(variant.operator)
        for shape in (s for s in shapes if isinstance(s, op.shape_type)):
            for dtype in DTYPES:
                for mode in op.modes:
                    case = Case(variant.name, shape, dtype, mode=mode, operator=op.name)
                    reason = skip_reason(variant, case)
                    if reason:
                        skipped[case.id] = reason
        skips[variant.name] = skipped
    return skips


def _skip_lines(set_name: str, skips: dict[str, dict[str, str]]) -> list[str]:
    lines = ["", f"cases of shape set {set_name!r} (its shapes of each variant's operator x dtypes x modes):"]
    for name, skipped in skips.items():
        op = get_operator(get(name).operator)
        total = sum(isinstance(s, op.shape_type) for s in shape_set(set_name)) * len(DTYPES) * len(op.modes)
        lines.append(f"{name}: runs {total - len(skipped)}/{total}")
        for reason, count in Counter(skipped.values()).most_common():
            lines.append(f"  skips {count}: {reason}")
    return lines


def _table(rows: list[dict]) -> str:
    headers = ("name", "operator", "family", "baseline", "needs", "available", "lineage")
    body = [
        (
            r["name"],
            r["operator"],
            r["family"],
            "yes" if r["is_baseline"] else "",
            ",".join(r["needs"]) or "-",
            "yes" if r["available"] else "no",
            r["lineage"],
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip() for b in body]
    missing = [r for r in rows if not r["available"]]
    if missing:
        lines.append("")
        lines += [f"{r['name']}: unavailable: {r['reason']}" for r in missing]
    return "\n".join(lines)


def _run(args) -> int:
    rows = variant_rows()
    skips = case_skips(args.shapes) if args.shapes else None
    if args.json:
        document = {
            "device": device_summary(),
            "capabilities": dataclasses.asdict(capabilities()),
            "variants": rows,
        }
        if skips is not None:
            document["shape_set"] = args.shapes
            document["skipped_cases"] = skips
        print(json.dumps(document, indent=2))
    else:
        print(f"device: {device_summary()}")
        print(_table(rows))
        if skips is not None:
            print("\n".join(_skip_lines(args.shapes, skips)))
    return 0
