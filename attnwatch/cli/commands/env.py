"""`attnwatch env`: print the environment a run would record, as JSON.

Includes git state of the current checkout and, on a GPU machine, the device properties
(this command may create a CUDA context: it is a process of its own).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "env",
        help="print the measurement environment (GPU, driver, CUDA, versions, git) as JSON",
        description="Print, as JSON, the environment a run here would record: the checkout's git state and, "
        "unless --no-device, the GPU's properties (which may create a CUDA context).",
    )
    p.add_argument("--repo", default=".", help="checkout whose git state to report (default: current directory)")
    p.add_argument("--no-device", action="store_true", help="do not ask torch for device properties (no CUDA context)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.ci.environment import capture_environment, capture_git

    env = capture_environment(probe_device=not args.no_device)
    git = capture_git(Path(args.repo))
    print(json.dumps({"environment": asdict(env), "git": asdict(git)}, indent=2))
    return 0
