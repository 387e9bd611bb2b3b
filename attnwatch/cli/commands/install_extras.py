"""`attnwatch install-extras fa4 [--wheels DIR]`: install optional extras on a GPU runner,
from the index or, offline, from a folder of wheels (ci/extras.py)."""

from __future__ import annotations

import shlex
import subprocess


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "install-extras",
        help="install attnwatch's optional extras (e.g. fa4), offline from a wheel folder with --wheels",
        description="pip-install the pinned packages of attnwatch's optional extras (e.g. fa4) into this Python, "
        "from the package index or, with --wheels, only from a folder of wheels.",
    )
    p.add_argument("extras", nargs="+", help="extras to install, by name (space- or comma-separated)")
    p.add_argument(
        "--wheels",
        default=None,
        help="a folder of wheels: install only from it (pip --no-index "
        "--find-links, each pin --no-deps); default: from the index",
    )
    p.add_argument("--dry-run", action="store_true", help="print the pip command instead of running it")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.ci.extras import pip_command

    extras = [e for item in args.extras for e in item.split(",") if e]
    command = pip_command(extras, args.wheels or None)
    if args.dry_run:
        print(shlex.join(["python", *command[1:]]))  # the interpreter by name: no machine path in a log
        return 0
    return subprocess.run(command, check=False).returncode
