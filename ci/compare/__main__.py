"""`python -m attnwatch.ci.compare ...`: the compare command alone.

Same arguments as `attnwatch compare`. It registers nothing but compare, so it starts on a GPU
runner whatever the other commands import (the history commands need duckdb, which a runner
that only measures may not have). It ends as every command does (ci.top_level): a refusal is one
line with exit 2, an unexpected exception one line with exit 70.
"""

from __future__ import annotations

import argparse
import sys

from attnwatch.ci.commands import compare
from attnwatch.ci.top_level import run_command


def main(argv: list[str] | None = None) -> int:
    """Run compare; its exit status and failure line as `attnwatch compare`'s (ci.top_level)."""
    return run_command(lambda: _parse(argv), argv=argv)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m attnwatch.ci.compare")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    compare.register(sub)
    return parser.parse_args(["compare", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
