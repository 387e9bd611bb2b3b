"""The table printed at the end of `attnwatch run`: one row per case, grouped by shape.

Columns: median (us), TFLOPS, GB/s (a memory-bound operator's byte model over the median; "-" for a
compute-bound one), gap to the operator's baseline, correctness (passed seeds / seeds), status. Read
from the bundle's records, so the table shows exactly what was stored.

A case that did not run says why by a note number (`skipped [1]`); each distinct reason is written
once under the table, whole and wrapped at word boundaries (a CPU run skips 31 cases for five
reasons, and a reason cut to fit a column ended mid-word, its fix with it).
"""

from __future__ import annotations

import textwrap
from typing import Any

from attnwatch.ci.suite_state import SuiteState
from attnwatch.history.terminal_text import one_line

CPU_MEDIAN_LABEL = "median_us (CPU wall clock)"  # a CPU run's times: host wall clock, never a GPU's
REASON_WIDTH = 100  # characters of a reason's line under the table
REASON_LIMIT = 1000  # characters of one reason at most (a crash's log tail can be longer)


def clip_words(text: str, limit: int) -> str:
    """`text` as one printable line of at most `limit` characters, cut at a word boundary with a
    trailing "..." (mid-word only for a single word longer than a quarter of the limit: a path)."""
    line = one_line(text, max(len(str(text)) * 8, 16))  # escaped, on one line, not yet cut
    if len(line) <= limit:
        return line
    cut = line[: max(limit - 4, 0)]
    space = cut.rfind(" ")
    if space >= len(cut) * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + " ..."


def reason_notes(rows: list[dict[str, Any]]) -> tuple[dict[str, int], list[str]]:
    """The note number of each distinct reason a case did not run, and the lines that give them
    (each reason whole up to REASON_LIMIT, wrapped at word boundaries)."""
    numbers: dict[str, int] = {}
    for r in rows:
        if r["error"] and r["status"] != "ok":
            numbers.setdefault(r["error"], len(numbers) + 1)
    lines = []
    for reason, n in numbers.items():
        lines += textwrap.wrap(
            clip_words(reason, REASON_LIMIT),
            REASON_WIDTH,
            initial_indent=f"[{n}] ",
            subsequent_indent=" " * (len(str(n)) + 3),
            break_long_words=False,
            break_on_hyphens=False,
        )
    return numbers, lines


def _fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0])
    return f"{'-':>{width}}" if value is None else format(value, spec)


def _gbps(timing: dict[str, Any]) -> float | None:
    """Achieved GB/s of a memory-bound case (CaseTiming.bytes / median); None for a compute-bound one."""
    if timing.get("bound") != "memory" or not timing.get("bytes") or not timing.get("median_us"):
        return None
    return timing["bytes"] / timing["median_us"] / 1e3


def summary_rows(state: SuiteState) -> list[dict[str, Any]]:
    rows = []
    for outcome in state.ordered_outcomes():
        timing = state.timings.get(outcome.case_id) if outcome.status == "ok" else None
        checks = state.correctness.get(outcome.case_id, [])
        rows.append(
            {
                "case": outcome.case_id,
                "median_us": timing["median_us"] if timing else None,
                "tflops": timing["tflops"] if timing else None,
                "gbps": _gbps(timing) if timing else None,
                "gap_to_baseline": timing.get("gap_to_baseline") if timing else None,
                "correct": f"{sum(1 for r in checks if r['passed'])}/{len(checks)}" if checks else "-",
                "status": outcome.status,
                "error": outcome.error,
            }
        )
    return rows


def format_summary(state: SuiteState, timing_mode: str) -> str:
    rows = summary_rows(state)
    width = max([len(r["case"]) for r in rows] + [4])
    unit = "median_us" if timing_mode != "cpu_wall" else CPU_MEDIAN_LABEL
    median_width = max(len(unit), 14)
    notes, note_lines = reason_notes(rows)
    lines = [
        f"{'case':<{width}}  {unit:>{median_width}}  {'TFLOPS':>8}  {'GB/s':>8}  {'gap/base':>8}  {'correct':>7}  status"
    ]
    for r in rows:
        status = f"{r['status']} [{notes[r['error']]}]" if r["status"] != "ok" and r["error"] in notes else r["status"]
        lines.append(
            f"{r['case']:<{width}}  {_fmt(r['median_us'], f'{median_width}.2f')}  {_fmt(r['tflops'], '8.2f')}  "
            f"{_fmt(r['gbps'], '8.1f')}  {_fmt(r['gap_to_baseline'], '8.3f')}  {r['correct']:>7}  {status}"
        )
    lines += note_lines
    lost = state.lost_cases()
    lines.append(
        f"{len(state.ok_ids())} measured, {len(lost)} lost, {len(rows) - len(state.ok_ids()) - len(lost)} skipped/unsupported"
    )
    timed = [state.timings[c] for c in state.ok_ids() if c in state.timings]
    unconverged = [t for t in timed if not t.get("converged")]
    if unconverged:
        worst = max(unconverged, key=lambda t: t["rel_spread"])
        lines.append(
            f"{len(unconverged)} cases stopped at the sample/time cap before IQR/median reached the target "
            f"(widest: {worst['case_id']} at {100 * worst['rel_spread']:.1f}%)"
        )
    throttled = [t for t in timed if t.get("throttled_samples")]
    if throttled:
        reasons = sorted({r for t in throttled for r in t.get("throttle_reasons", [])})
        lines.append(
            f"WARNING: {len(throttled)} cases have samples taken while the GPU was throttled ({', '.join(reasons)})"
        )
    uncovered = [t for t in timed if t.get("guard_uncovered_blocks")]
    if uncovered:
        blocks = sum(t["guard_uncovered_blocks"] for t in uncovered)
        worst = max(uncovered, key=lambda t: t["guard_uncovered_blocks"])
        lines.append(
            f"WARNING: {len(uncovered)} cases kept {blocks} blocks the guard kernel did not cover "
            f"(samples possibly containing host gaps; most: {worst['case_id']}, "
            f"{worst['guard_uncovered_blocks']} blocks)"
        )
    tuned = [t["case_id"] for t in timed if t.get("kernel_config_source") == "tuned"]
    if tuned:
        lines.append(
            f"NOTE: {len(tuned)} cases ran a launch configuration tuned in this process (no recorded "
            f"entry for this GPU: kernels/triton/choices.toml), which a fresh process may pick "
            f"differently: {', '.join(tuned[:4])}" + (" ..." if len(tuned) > 4 else "")
        )
    failed_checks = sorted({cid for cid, records in state.correctness.items() if any(not r["passed"] for r in records)})
    if failed_checks:
        lines.append(
            f"CORRECTNESS: {len(failed_checks)} cases failed a check: {', '.join(failed_checks[:8])}"
            + (" ..." if len(failed_checks) > 8 else "")
        )
    return "\n".join(lines)


def format_ncu_line(ncu: Any) -> str:
    """One line on the ncu pass (ci.ncu.profile.NcuProfile): profiled, cut by the deadline, failed."""
    from attnwatch.ci.ncu.profile import DEADLINE_ERROR

    metrics = ncu.case_metrics
    cut = [m for m in metrics if (m.error or "").startswith(DEADLINE_ERROR)]
    failed = [m for m in metrics if m.error and not m.error.startswith(DEADLINE_ERROR)]
    line = f"ncu: {len(metrics) - len(cut) - len(failed)} of {len(metrics)} cases profiled in {ncu.seconds:.0f} s"
    if cut:
        line += f"; WARNING: {len(cut)} {DEADLINE_ERROR}"
    if failed:
        line += f"; {len(failed)} without metrics (first: {failed[0].case_id}: {failed[0].error[:160]})"
    return line
