"""A stand-in for Nsight Compute's `ncu`, for tests on machines without a GPU.

Run as a program (tests install it with `install`): it answers `--version`; for a profiling
command it reads the plan `ci.ncu.target` would run, prints the target's outcome lines and
writes a "report" naming each variant's case; for `--import REPORT` it prints the real H200 raw
CSV fixture with the fixture's NVTX ranges (sdpa, sdpa_flash, torch_3op) renamed to those cases.

Environment: FAKE_NCU_FIXTURE (the CSV), FAKE_NCU_MODE (ok | fail | perm | hang | case_fails),
FAKE_NCU_HANG (variants whose profiling hangs; FAKE_NCU_MARKER then names a file written first).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def install(directory: Path, monkeypatch, fixtures_dir: Path) -> Path:
    """Put an executable `ncu` running this module in `directory` and point ATTNWATCH_NCU at it."""
    path = Path(directory) / "ncu"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    path.chmod(0o755)
    monkeypatch.setenv("ATTNWATCH_NCU", str(path))
    monkeypatch.setenv("FAKE_NCU_FIXTURE", str(fixtures_dir / "ncu" / "h200_raw_sdpa_flash_3op.csv"))
    return path


def _case_id(case: dict) -> str:
    return "/".join([case["variant"], case["shape"]["id"], case["dtype"], "causal" if case["causal"] else "noncausal"])


def _outcome(case_id: str, status: str, error: str | None) -> None:
    print("attnwatch-ncu:" + json.dumps({"case_id": case_id, "status": status, "error": error}), flush=True)


def main(args: list[str]) -> int:
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    if args == ["--version"]:
        print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 0)")
        return 0
    if "--import" in args:
        wanted = json.loads(Path(args[args.index("--import") + 1]).read_text())
        out = []
        for line in Path(os.environ["FAKE_NCU_FIXTURE"]).read_text().splitlines():
            if "<default domain>:" not in line:
                out.append(line)
                continue
            for variant, case_id in wanted.items():
                marker = "<default domain>:" + variant + ":none"
                if marker in line:
                    out.append(line.replace(marker, "<default domain>:" + case_id + ":none"))
        print("\n".join(out))
        return 0
    if mode == "hang":
        time.sleep(60)
    if mode == "fail":
        print("==ERROR== The application returned an error code (1).")
        return 1
    if mode == "perm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
        return 1
    assert "--clock-control" in args and args[args.index("--clock-control") + 1] == "none"
    assert "--profile-from-start" in args and "--nvtx" in args
    plan = json.loads(Path(args[-1]).read_text())
    ranges = {}
    for case in plan["cases"]:
        case_id = _case_id(case)
        if case["variant"] in os.environ.get("FAKE_NCU_HANG", "").split(","):
            Path(os.environ["FAKE_NCU_MARKER"]).write_text(case["variant"] + " " + str(os.getpid()))
            time.sleep(600)
        if mode == "case_fails" and case["variant"] == "torch_3op":
            _outcome(case_id, "failed", "RuntimeError: boom")
            continue
        ranges[case["variant"]] = case_id
        _outcome(case_id, "ok", None)
    Path(args[args.index("--export") + 1] + ".ncu-rep").write_text(json.dumps(ranges))
    print("==PROF== Disconnected from process 1")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
