"""A stand-in for Nsight Compute's `ncu`, for tests on machines without a GPU.

Run as a program (tests install it with `install`): it answers `--version`; for a profiling
command it reads the plan `ci.ncu.target` would run, prints the target's outcome lines and
writes a "report" naming each case; for `--import REPORT` it prints the real H200 raw CSV
fixture's rows for those cases. The default fixture (tests/data/ncu/h200_raw_pr_default.csv) is
a whole `attnwatch ncu --shapes pr` pass whose NVTX ranges are the case ids: a case's rows are
the fixture's rows of the same variant (its shape renamed when the fixture lacks it). The older
fixture's ranges are variant names (sdpa, sdpa_flash, torch_3op) and are renamed likewise.

Environment: FAKE_NCU_FIXTURE (the CSV), FAKE_NCU_MODE (ok | fail | perm | perm_late | hang | case_fails |
crash: the target dies in every torch_3op case | no_sass_metric: a metric list holding a `sass__`
metric is refused, as an ncu without SASS patching would | no_shared_wavefronts: a list holding the
shared-memory wavefronts is refused, naming the metric without its `.sum`), FAKE_NCU_HANG (variants whose profiling
hangs; FAKE_NCU_MARKER then names a file written first), FAKE_NCU_SLOW (variants whose case
ends just after the plan's `stop_at`, so the cases after it are not started), FAKE_NCU_CWD (a file the stand-in
writes its working directory to), FAKE_NCU_ARGS (a file it writes its arguments to, as JSON),
FAKE_NCU_PASSES (the replay passes it logs per profiled case, default 2), FAKE_NCU_LOG (a file it
appends every invocation's arguments to, one JSON line each), FAKE_NCU_VERSION (the version line
it answers, default "Version 2025.3.1.0 (build 0)"). A program profiled from its start (not the
target) gets one pass per four metrics (`_plain_program`).
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
    monkeypatch.setenv("FAKE_NCU_FIXTURE", str(fixtures_dir / "ncu" / "h200_raw_pr_default.csv"))
    return path


def _case_id(case: dict) -> str:
    return "/".join([case["variant"], case["shape"]["id"], case["dtype"], "causal" if case["causal"] else "noncausal"])


def _outcome(case_id: str, status: str, error: str | None) -> None:
    print("attnwatch-ncu:" + json.dumps({"case_id": case_id, "status": status, "error": error}), flush=True)


def main(args: list[str]) -> int:
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    if os.environ.get("FAKE_NCU_LOG"):
        with open(os.environ["FAKE_NCU_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps(args) + "\n")
    if args == ["--version"]:
        version = os.environ.get("FAKE_NCU_VERSION", "Version 2025.3.1.0 (build 0)")
        print(f"NVIDIA (R) Nsight Compute Command Line Profiler\n{version}")
        return 0
    if "--import" in args:
        wanted = json.loads(Path(args[args.index("--import") + 1]).read_text())
        out = []
        lines = Path(os.environ["FAKE_NCU_FIXTURE"]).read_text().splitlines()
        for case_id in wanted:
            source = _fallback(lines, case_id)
            out += [_renamed(line, case_id) for line in lines if source and _range_of(line) == source]
        print("\n".join([line for line in lines if "<default domain>:" not in line] + out))
        return 0
    if mode == "hang":
        time.sleep(60)
    if mode == "fail":
        print("==ERROR== The application returned an error code (1).")
        return 1
    if mode == "no_sass_metric" and "--metrics" in args and "sass__" in args[args.index("--metrics") + 1]:
        print('==ERROR== Failed to profile "stand_in_kernel": metric sass__inst_executed_per_opcode not found')
        return 1
    wavefronts = "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared"
    if mode == "no_shared_wavefronts" and "--metrics" in args and wavefronts in args[args.index("--metrics") + 1]:
        print(f"==ERROR== Failed to find metric {wavefronts}")
        return 1
    if mode == "perm":
        print(
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
        )
        return 1
    assert "--clock-control" in args and args[args.index("--clock-control") + 1] == "none"
    if "--profile-from-start" not in args:
        return _plain_program(args)
    assert "--profile-from-start" in args and "--nvtx" in args
    plan = json.loads(Path(args[-1]).read_text())
    if os.environ.get("FAKE_NCU_ARGS"):
        Path(os.environ["FAKE_NCU_ARGS"]).write_text(json.dumps(args))
    if os.environ.get("FAKE_NCU_CWD"):
        Path(os.environ["FAKE_NCU_CWD"]).write_text(os.getcwd())
    ranges = []
    print("==PROF== Connected to process 1", flush=True)
    for case in plan["cases"]:
        case_id = _case_id(case)
        if plan.get("stop_at") is not None and time.time() >= plan["stop_at"]:
            _outcome(case_id, "deadline", "not started: the run's deadline is near")  # as ci.ncu.target does
            continue
        if case["variant"] in os.environ.get("FAKE_NCU_SLOW", "").split(","):
            time.sleep(max(0.0, plan["stop_at"] + 0.3 - time.time()))  # finishes just after the stop time
        if mode == "crash" and case["variant"] == "torch_3op":
            Path(args[args.index("--export") + 1] + ".ncu-rep").write_text(json.dumps(ranges))
            print("==ERROR== The application returned an error code (11).")
            return 1
        if case["variant"] in os.environ.get("FAKE_NCU_HANG", "").split(","):
            Path(os.environ["FAKE_NCU_MARKER"]).write_text(case["variant"] + " " + str(os.getpid()))
            time.sleep(600)
        if mode == "case_fails" and case["variant"] == "torch_3op":
            _outcome(case_id, "failed", "RuntimeError: boom")
            continue
        ranges.append(case_id)
        print(
            f'==PROF== Profiling "stand_in_kernel" - {len(ranges) - 1}: 0%....50%....100% - '
            f"{os.environ.get('FAKE_NCU_PASSES', '2')} passes",
            flush=True,
        )  # as ncu logs each kernel
        _outcome(case_id, "ok", None)
    if mode == "perm_late":  # the target ran, but ncu could read no counter: a report without kernels
        Path(args[args.index("--export") + 1] + ".ncu-rep").write_text(json.dumps([]))
        print(
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
        )
        return 1
    Path(args[args.index("--export") + 1] + ".ncu-rep").write_text(json.dumps(ranges))
    print("==PROF== Disconnected from process 1")
    return 0


def _plain_program(args: list[str]) -> int:
    """A program profiled from its start (scripts/ncu_passes.py's probe): one kernel, whose replay
    passes are one per started group of four metrics (ncu's real rule is the hardware's counters);
    a metric named with "no_such" is refused as ncu refuses an unknown name."""
    metrics = args[args.index("--metrics") + 1].split(",") if "--metrics" in args else []
    unknown = [m for m in metrics if "no_such" in m]
    if unknown:
        print(f"==ERROR== Failed to find metric {unknown[0]}")
        return 1
    print("==PROF== Connected to process 1", flush=True)
    print(f'==PROF== Profiling "probe" - 0: 0%....50%....100% - {max(1, -(-len(metrics) // 4))} passes', flush=True)
    print("==PROF== Disconnected from process 1")
    return 0


def _range_of(line: str) -> str | None:
    """The NVTX range (case id, or variant in the older fixture) of a fixture row."""
    if "<default domain>:" not in line:
        return None
    return line.split("<default domain>:", 1)[1].split(":none", 1)[0]


def _fallback(lines: list[str], case_id: str) -> str | None:
    """The fixture's range standing in for a case it lacks: the same variant, any shape."""
    variant = case_id.split("/")[0]
    ranges = {_range_of(line) for line in lines} - {None}
    if case_id in ranges:
        return case_id
    same = sorted(r for r in ranges if r == variant or r.startswith(variant + "/"))
    return same[0] if same else None


def _renamed(line: str, case_id: str) -> str:
    found = _range_of(line)
    return line.replace("<default domain>:" + found + ":none", "<default domain>:" + case_id + ":none")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
