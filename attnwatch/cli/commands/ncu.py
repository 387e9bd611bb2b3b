"""`attnwatch ncu`: profile chosen cases under Nsight Compute and print the per-case table."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.ci.ncu.profile import profile_cases
from attnwatch.ci.selection import select_cases as selection_for
from attnwatch.history.contract.bundle import NcuCaseMetrics
from attnwatch.history.contract.bundle_writer import write_ncu_files
from attnwatch.kernels import registry
from attnwatch.kernels.cases import Case
from attnwatch.ci.ncu.metrics import choose_sections

# What the default sections give (one replay pass): the speed-of-light percentages come only
# with --sections all, so the table shows the bytes the traffic and spill rules read instead.
TABLE_COLUMNS = (
    ("case", 44),
    ("kernels", 7),
    ("dur_us", 9),
    ("DRAM_MB", 8),
    ("local_MB", 8),
    ("tensor%", 7),
    ("occ%", 6),
    ("regs", 5),
    ("limiter", 20),
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "ncu",
        help="profile cases under Nsight Compute (--clock-control none) and print the metrics",
        description="Profile one call per case under ncu (one process for every case) with the metric "
        "list's sections (or --full), attribute kernels to cases by NVTX range, and print durations, "
        "DRAM and local-memory bytes, tensor pipe, occupancy and registers per case.",
    )
    p.add_argument("--shapes", default="pr", help="shape set (pr, main, nightly, cpu); default pr")
    p.add_argument("--variants", default="", help="comma-separated variant names (default: all available)")
    p.add_argument(
        "--dtypes", default=None, help="comma-separated dtypes (default: the shape set's, ci/run_config.toml)"
    )
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--cases", nargs="*", default=[], help="case ids or fnmatch patterns to keep")
    p.add_argument(
        "--sections",
        default=None,
        help="comma-separated metric sections of ci/ncu/metrics.toml, 'explain' (the default ones and every "
        "counter a rule reads, as a compare's judged cases get) or 'all' (default: its default "
        "sections, one replay pass)",
    )
    p.add_argument("--full", action="store_true", help="collect `--set full` (slow; nightly)")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds for the ncu process, one for every case (default: ci/run_config.toml [defaults] ncu_timeout_s)",
    )
    p.add_argument("--out", default="ncu-out", help="directory for ncu.json, ncu_raw.csv and reports")
    p.set_defaults(func=_run)


def select_cases(args) -> list[Case]:
    """The flags' cases (ci.selection, as `attnwatch run` reads them), kept when runnable here
    and, with --cases, when a pattern matches."""
    from attnwatch.kernels.availability import availability

    selection = selection_for(args.shapes, args.variants or None, args.dtypes, args.causal, "cuda")
    cases = []
    for planned in selection.cases:
        variant = registry.get(planned.variant)
        if not args.variants and not availability(variant)[0]:
            continue
        if args.cases and not any(fnmatch.fnmatch(planned.case_id, p) for p in args.cases):
            continue
        cases.append(planned.to_case())
    return cases


def format_table(metrics: list[NcuCaseMetrics]) -> str:
    def cell(value, width, digits=1):
        if value is None:
            text = "-"
        elif isinstance(value, float):
            text = f"{value:.{digits}f}"
        else:
            text = str(value)
        return text[:width].rjust(width)

    lines = [" ".join(name.rjust(width) for name, width in TABLE_COLUMNS)]
    for m in metrics:
        if m.kernel_count == 0:
            lines.append(f"{m.case_id[:44].rjust(44)}  no metrics: {m.error}")
            continue
        lines.append(
            " ".join(
                (
                    cell(m.case_id, 44),
                    cell(m.kernel_count, 7),
                    cell(m.duration_us, 9, 2),
                    cell(_mega(m.dram_bytes), 8),
                    cell(_mega(m.local_memory_bytes), 8),
                    cell(m.tensor_pipe_pct, 7),
                    cell(m.achieved_occupancy_pct, 6),
                    cell(m.registers_per_thread, 5, 0),
                    cell(m.occupancy_limiter, 20),
                )
            )
        )
    return "\n".join(lines)


def _mega(value: float | None) -> float | None:
    return None if value is None else value / 1e6


def _run(args) -> int:
    try:
        sections = choose_sections(args.sections)
    except ValueError as exc:
        raise UserError(f"--sections: {exc}") from None
    cases = select_cases(args)
    if not cases:
        raise UserError("no cases selected (check --shapes, --variants, --cases, and `attnwatch variants`)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = _gpu_name()
    profile = profile_cases(
        cases, out / "reports", full=args.full, sections=sections, timeout_s=args.timeout, gpu_name=gpu
    )
    write_ncu_files(out, profile.files())
    print(format_table(profile.case_metrics))
    print(
        f"\n{len(cases)} cases, {profile.seconds:.1f} s under ncu {profile.ncu_version or '(unknown)'}; "
        f"{len(profile.errors)} without metrics; wrote {out / 'ncu.json'}"
    )
    summary = {"cases": len(cases), "seconds": profile.seconds, "errors": profile.errors}
    (out / "ncu_summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0 if len(profile.errors) < len(cases) else 1


def _gpu_name() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
