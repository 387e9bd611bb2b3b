"""`python -m ci.compare ...`: the compare command alone.

Same arguments as `attnwatch compare`. It registers nothing but compare, so it starts on a GPU
runner whatever the other commands import (the history commands need duckdb, which a runner
that only measures may not have).
"""

from __future__ import annotations

import argparse
import sys

from attnwatch.ci.commands import compare
from attnwatch.ci.errors import UserError
from attnwatch.history.errors import HistoryError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.compare")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    compare.register(sub)
    args = parser.parse_args(["compare", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except (UserError, HistoryError) as exc:
        print(f"attnwatch compare: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
