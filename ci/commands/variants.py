"""`attnwatch variants` (placeholder until its issue lands: it says so and exits non-zero)."""

from __future__ import annotations

import sys


def register(subparsers) -> None:
    p = subparsers.add_parser("variants", help="(not yet implemented)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    print("attnwatch variants: not implemented yet", file=sys.stderr)
    return 3
