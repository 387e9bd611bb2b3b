"""`attnwatch variants [--json]`: every registered variant and whether it runs here.

Lists name, family, lineage (the seeds' name for it), whether it is the gap-to-SDPA
reference, what it needs, and its availability on this machine with the reason when it is
unavailable, under a one-line description of the device.
"""

from __future__ import annotations

import json
import sys

import dataclasses

from kernels.availability import availability, capabilities, device_summary
from kernels.registry import all_variants


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "variants",
        help="list the kernel variants and whether each runs on this machine",
        description="List every registered attention variant with its family, lineage, needs and availability here.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.set_defaults(func=_run)


def variant_rows() -> list[dict]:
    rows = []
    for variant in all_variants():
        ok, reason = availability(variant)
        rows.append({
            "name": variant.name,
            "family": variant.family,
            "lineage": variant.lineage,
            "description": variant.description,
            "is_reference": variant.is_reference,
            "needs": sorted(variant.needs),
            "available": ok,
            "reason": reason or None,
        })
    return rows


def _table(rows: list[dict]) -> str:
    headers = ("name", "family", "ref", "needs", "available", "lineage")
    body = [
        (
            r["name"], r["family"], "yes" if r["is_reference"] else "", ",".join(r["needs"]) or "-",
            "yes" if r["available"] else "no", r["lineage"],
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
    if args.json:
        document = {
            "device": device_summary(),
            "capabilities": dataclasses.asdict(capabilities()),
            "variants": rows,
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"device: {device_summary()}")
        print(_table(rows))
    return 0
