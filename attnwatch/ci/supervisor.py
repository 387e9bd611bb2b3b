"""Run a plan of cases in supervised child processes and write a run bundle: `run_suite`.

The parent never touches CUDA. It writes a plan, starts `python -m pytest ci/suites ...` in a
new process group, and follows the child's journal (ci/journal.py):

* a case the child finished (any status) is kept, whatever happens to the child later;
* the child exits abnormally (abort, segfault, a CUDA error it journalled itself): the case
  in flight is re-run alone in a fresh process (ci/attribution.py); if it crashes alone it is
  `crashed` (attributed) with the exit status and the tail of the child's log, else the crash
  is noted as of unknown origin and the case is measured again once; a fresh child is started
  for the cases not yet finished;
* the journal stays silent for `case_timeout_s`: the child's process group is killed, the
  case in flight is `timeout`, and a fresh child continues;
* a child that finishes nothing at all (an import error, a broken plugin) fails the remaining
  cases with its log tail instead of being restarted forever.

The bundle is always written and valid; its status is `partial` when any case was lost.
It is written as soon as the cases are measured, BEFORE the optional ncu pass: ncu can take
minutes, and a GPU job killed by its time limit during ncu must still leave the timing,
outcomes and correctness records. The ncu pass respects `RunOptions.deadline` (cases that
do not fit are recorded as not profiled) and its files are then added to the written bundle.

`compare` uses `run_suite(..., kernels_root=<a worktree of the merge base>)`: the child then
imports `kernels` from that checkout (a temp dir holding a `kernels` symlink goes first on
its PYTHONPATH; pytest runs with `--import-mode=append` so nothing puts the head's copy
first), while `ci` and `history` stay this checkout's.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from attnwatch.ci.attribution import Crash, CrashAttribution
from attnwatch.ci.bundle_assembly import RunHead, add_ncu, run_status, write_bundle
from attnwatch.ci.child_env import IMPORT_ROOT, child_env
from attnwatch.ci.environment import capture_environment, capture_git, harness_digest
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.progress import Progress
from attnwatch.ci.run_config import TimingConfig, case_timeout, configured
from attnwatch.ci.suite_state import SuiteState
from attnwatch.history.temp_dirs import mark_kept, owned_temp_dir

REPO_ROOT = IMPORT_ROOT  # this checkout, whose git state a run records

# The one pytest plugin the measuring child loads. Every other installed plugin (pytest11 entry
# points: xdist, hypothesis, anyio, a team's own) stays out of the timed process, so none of them
# can hook a measured call; their imports also cost the child about 1.1 s a run on a 2-core CPU.
MEASURING_PLUGIN = "pytest_benchmark.plugin"

# The folder holding this `ci` and `kernels` (attnwatch/, in a checkout or a wheel): the measuring code.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SUITES_DIR = Path(__file__).resolve().parent / "suites"
LOG_TAIL_CHARS = 2000
RUN_DIR_PREFIX = "attnwatch-run-"  # + pid: a killed run's work dir is swept by the next (history/temp_dirs.py)


@dataclass
class RunOptions:
    """How to run a suite. `device_kind` is "cuda" or "cpu" (resolved by the caller).

    Every default that is a setting comes from ci/run_config.toml (`configured`); the case
    timeout, when not given, is the device kind's ([defaults] case_timeout_<kind>_s)."""

    shape_set: str
    device_kind: str
    timing: TimingConfig
    correctness: bool = True
    case_timeout_s: float | None = None
    build_timeout_s: float = configured("build_timeout_s")
    trigger: str = "local"
    correctness_seeds: list[int] = configured("correctness_seeds")
    timing_seed: int = configured("timing_seed")
    max_restarts: int = configured("max_child_restarts")
    build: bool = True
    ncu: bool = False
    ncu_full: bool = False
    ncu_timeout_s: float = configured("ncu_timeout_s")
    ncu_cases: list[str] = field(default_factory=list)  # fnmatch patterns on case ids; empty = all
    progress: bool = True
    plain_progress: bool = False  # one line per finished case instead of a bar (logs, non-TTY)
    notes: str = ""
    python: str = sys.executable
    # For tests and plugins: modules the child imports to register extra variants, and the
    # directories that hold them (prepended to the child's PYTHONPATH).
    extra_variant_modules: list[str] = field(default_factory=list)
    extra_sys_path: list[str] = field(default_factory=list)
    keep_work_dir: bool = False
    # The commit measured, when the checkout cannot say (a copied tree without .git).
    commit_sha: str | None = None
    # Wall-clock limit of the whole run (time.monotonic() value): past it the child is stopped
    # and the cases not finished are recorded as not run, so a run inside a CI step with a
    # time limit still ends with a valid bundle instead of being killed from outside.
    deadline: float | None = None
    # Silence allowed before a child's first journal line (interpreter, torch and pytest start-up).
    startup_timeout_s: float = configured("startup_timeout_s")
    # Called with the bundle directory each time it is (re)written complete: once after the
    # cases are measured, again after ncu's files are added. A caller whose job can be killed
    # from outside (gpu_check) copies the bundle out at once instead of waiting for the end.
    on_bundle_written: Callable[[Path], None] | None = None
    # Diagnostic mode: children run with CUDA_LAUNCH_BLOCKING=1 (every launch synchronous, so a
    # faulting kernel is named by the launch that reports it). Timings are then not comparable.
    diagnose: bool = False

    def __post_init__(self) -> None:
        if self.case_timeout_s is None:
            self.case_timeout_s = case_timeout(self.device_kind)


def resolve_kernels_checkout(kernels_root: Path | None) -> Path | None:
    """Accept a checkout root (holding `kernels/`) or the `kernels` package dir itself."""
    if kernels_root is None:
        return None
    root = Path(kernels_root).absolute()
    if (root / "kernels" / "__init__.py").is_file():
        return root.resolve()
    if root.name == "kernels" and (root / "__init__.py").is_file():  # `<checkout>/kernels`, a link or the folder
        return root.parent.resolve()
    raise FileNotFoundError(f"{kernels_root}: no kernels package there (expected <root>/kernels/__init__.py)")


@dataclass
class SuiteResult:
    bundle: Path
    state: SuiteState
    status: str
    work_dir: Path | None  # child logs and journals, kept when a case was lost
    ncu: Any = None  # ci.ncu.profile.NcuProfile when --ncu ran


def run_suite(cases: list[PlannedCase], *, kernels_root: Path | None, out_dir: Path, options: RunOptions) -> Path:
    """Measure `cases` (ci.plan.PlannedCase) in supervised children; returns the bundle dir.

    `kernels_root`: None for this checkout's kernels, or another checkout's root (or its
    `kernels` dir) whose variants the child should measure. Never raises for a case's
    failure: lost cases are recorded and the bundle's status says `partial`.
    """
    return execute_suite(cases, kernels_root=kernels_root, out_dir=out_dir, options=options).bundle


def execute_suite(
    cases: list[PlannedCase], *, kernels_root: Path | None, out_dir: Path, options: RunOptions
) -> SuiteResult:
    """`run_suite`, also returning what was collected (for the summary table)."""
    if not cases:
        raise ValueError("no cases to run")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    checkout = resolve_kernels_checkout(kernels_root)
    started_at = _utc_now()
    git = capture_git(checkout or REPO_ROOT)
    if options.commit_sha:
        git.sha = options.commit_sha
    environment = capture_environment(probe_device=False)
    environment.device_kind = options.device_kind
    environment.harness_digest = harness_digest(PACKAGE_ROOT)  # the measuring code is this checkout's
    work = owned_temp_dir(RUN_DIR_PREFIX)
    plan = RunPlan(
        cases=list(cases),
        timing=options.timing.to_dict(),
        device_kind=options.device_kind,
        correctness=options.correctness,
        correctness_seeds=list(options.correctness_seeds),
        timing_seed=options.timing_seed,
        build=options.build,
        extra_variant_modules=list(options.extra_variant_modules),
    )
    state = SuiteState(cases)
    progress = Progress(len(cases), enabled=options.progress, plain=options.plain_progress)
    interrupted = False
    try:
        _supervise(plan, state, work, checkout, options, progress)
    except KeyboardInterrupt:
        # The child is already killed (_run_child); keep what finished in a valid bundle.
        interrupted = True
        state.inflight = None
        state.finish_generation(
            work / "interrupted-benchmark.json", rc=None, timed_out=False, log_tail="", timeout_s=0.0
        )
        state.fail_remaining("not run: the run was interrupted")
    finally:
        progress.close()
    head = RunHead(
        git=git,
        environment=environment,
        shape_set=options.shape_set,
        trigger=options.trigger,
        started_at=started_at,
        finished_at=_utc_now(),
        notes=options.notes,
    )
    bundle = write_bundle(out_dir, state, head)
    _announce(options, bundle)
    keep = options.keep_work_dir or bool(state.lost_cases())
    if keep:  # its path is shown to the user: never swept as a dead process's leftover
        mark_kept(work, "child logs and journals of a run that lost cases or was asked to keep them")
    ncu = None
    try:
        if interrupted:
            raise KeyboardInterrupt(f"interrupted; the cases finished so far are in {bundle}")
        ncu = _profile(state, checkout, work, options, environment.gpu_name)
        if ncu is not None:
            add_ncu(bundle, ncu, finished_at=_utc_now(), note=_ncu_note(ncu))
            _announce(options, bundle)
    except KeyboardInterrupt as exc:
        if interrupted:
            raise exc from None
        # Ctrl-C during ncu: the measured bundle is already complete
        raise KeyboardInterrupt(f"interrupted during the ncu pass; the measured bundle is in {bundle}") from None
    finally:
        if not keep:
            _remove_tree(work)
    return SuiteResult(bundle, state, run_status(state), work if keep else None, ncu)


def _announce(options: RunOptions, bundle: Path) -> None:
    if options.on_bundle_written is not None:
        options.on_bundle_written(bundle)


def _ncu_note(ncu: Any) -> str:
    """A manifest note when the run's deadline left cases unprofiled (empty otherwise)."""
    from attnwatch.ci.ncu.profile import DEADLINE_ERROR

    cut = sum(1 for m in ncu.case_metrics if (m.error or "").startswith(DEADLINE_ERROR))
    return f"ncu: {cut} of {len(ncu.case_metrics)} cases {DEADLINE_ERROR}" if cut else ""


def _supervise(
    plan: RunPlan, state: SuiteState, work: Path, checkout: Path | None, options: RunOptions, progress: Progress
) -> None:
    env = _child_env(work, checkout, options)
    assert options.case_timeout_s is not None  # RunOptions.__post_init__ sets it
    attribution = CrashAttribution()
    generation = 0
    while state.remaining() and generation <= options.max_restarts:
        remaining = state.remaining()
        gen_plan = plan.with_cases(remaining)
        paths = {
            name: work / f"{name}-{generation}{ext}"
            for name, ext in (("plan", ".json"), ("journal", ".jsonl"), ("benchmark", ".json"), ("log", ".log"))
        }
        gen_plan.save(paths["plan"])
        before = len(state.outcomes)
        rc, timed_out = _run_child(paths, env, options, state, progress)
        log_tail = _tail(paths["log"])
        if _past(options.deadline):
            state.inflight = None  # the case in flight did nothing wrong: the run ran out of time
            state.finish_generation(
                paths["benchmark"], rc=rc, timed_out=False, log_tail=log_tail, timeout_s=options.case_timeout_s
            )
            state.fail_remaining("not run: the run's deadline passed before this case finished")
            progress.sync(state)
            break
        state.finish_generation(
            paths["benchmark"], rc=rc, timed_out=timed_out, log_tail=log_tail, timeout_s=options.case_timeout_s
        )
        crash = state.take_crash()
        if crash is not None:
            _attribute(replace(crash, where=f"child {generation}"), attribution, plan, state, work, checkout, options)
        progress.sync(state)
        if len(state.outcomes) == before and crash is None:
            state.fail_remaining(f"the measuring child finished no case (exit status {rc}); its log ends: {log_tail}")
            progress.sync(state)
            break
        generation += 1
    if state.remaining():
        state.fail_remaining(f"gave up after {options.max_restarts} child restarts")
        progress.sync(state)


def _attribute(
    crash: Crash,
    attribution: CrashAttribution,
    plan: RunPlan,
    state: SuiteState,
    work: Path,
    checkout: Path | None,
    options: RunOptions,
) -> None:
    """A child died with `crash.case_id` in flight: re-run it alone to tell whether it caused
    the crash (ci/attribution.py); record it, or leave it to the next child (its one retry)."""
    from attnwatch.ci.workers.client import WorkerSpec, probe_case

    spec = WorkerSpec(
        plan=plan.with_cases([state.cases[crash.case_id]]),
        side="isolated re-run",
        checkout=checkout,
        work_dir=work,
        python=options.python,
        extra_sys_path=list(options.extra_sys_path),
        startup_timeout_s=options.startup_timeout_s,
        build_timeout_s=options.build_timeout_s,
        case_timeout_s=options.case_timeout_s,
    )
    decision = attribution.decide(
        crash, lambda case_id, stage: probe_case(spec, case_id, stage, f"probe-{attribution.probes}")
    )
    if not decision.retry:
        state.record(crash.case_id, decision.status or "crashed", decision.error)
    if decision.note:
        state.notes.append(decision.note)


def _run_child(
    paths: dict[str, Path], env: dict[str, str], options: RunOptions, state: SuiteState, progress: Progress
) -> tuple[int, bool]:
    """Start one child, follow its journal until it exits or goes silent; (exit code, timed out)."""
    from attnwatch.ci.journal import JournalReader

    assert options.case_timeout_s is not None  # RunOptions.__post_init__ sets it
    cmd = [
        options.python,
        "-m",
        "pytest",
        str(SUITES_DIR / "test_bench.py"),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        MEASURING_PLUGIN,
        "--import-mode=append",
        "--rootdir",
        str(PACKAGE_ROOT),
        "-o",
        "addopts=",
        "-o",
        "console_output_style=classic",
        "--attnwatch-plan",
        str(paths["plan"]),
        "--attnwatch-journal",
        str(paths["journal"]),
        "--benchmark-json",
        str(paths["benchmark"]),
        "--benchmark-disable-gc",
    ]
    reader = JournalReader(paths["journal"])
    with open(paths["log"], "wb") as log:
        # cwd is the work dir, not a checkout: `python -m` puts the cwd first on sys.path, which
        # would shadow the kernels of `kernels_root` with the head's.
        proc = subprocess.Popen(
            cmd, cwd=str(paths["plan"].parent), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        last_event = time.monotonic()
        seen_any = False
        timed_out = False
        try:
            while True:
                events = reader.read_new()
                for event in events:
                    state.apply(event)
                    progress.on_event(event, state)
                if events:
                    last_event = time.monotonic()
                    seen_any = True
                if proc.poll() is not None:
                    break
                limit = options.case_timeout_s
                if not seen_any:
                    limit = max(limit, options.startup_timeout_s)
                elif state.inflight is not None and state.inflight.get("kind") == "build":
                    limit = max(limit, options.build_timeout_s)
                if _past(options.deadline):
                    _kill_group(proc)
                    break
                if time.monotonic() - last_event > limit:
                    timed_out = True
                    _kill_group(proc)
                    break
                time.sleep(0.05)
        except BaseException:
            _kill_group(proc)
            # Ctrl-C: what the child journalled before it was killed is kept (a case it finished
            # a moment ago, not yet read, is not "not run").
            _apply_new(reader, state, progress)
            raise
        _apply_new(reader, state, progress)
    return proc.returncode, timed_out


def _apply_new(reader: Any, state: SuiteState, progress: Progress) -> None:
    """Apply the journal's events not read yet."""
    for event in reader.read_new():
        state.apply(event)
        progress.on_event(event, state)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() > deadline


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (it was started in a session of its own)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _child_env(work: Path, checkout: Path | None, options: RunOptions) -> dict[str, str]:
    extra = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # MEASURING_PLUGIN says why
    if options.diagnose:
        extra["CUDA_LAUNCH_BLOCKING"] = "1"
    return child_env(work, checkout, options.extra_sys_path, extra)


def _profile(state: SuiteState, checkout: Path | None, work: Path, options: RunOptions, gpu_name: str | None):
    """ncu metrics for the cases that timed ok (`--ncu`); None when not asked for."""
    if not options.ncu:
        return None
    from attnwatch.ci.ncu.metrics import choose_sections
    from attnwatch.ci.ncu.profile import profile_cases

    cases = state.ok_kernel_cases()
    if options.ncu_cases:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.id, p) for p in options.ncu_cases)]
    # Every section, not the PR's lean list: a run's profile is the history the Kernel page charts
    # (SM and DRAM throughput, L2 hit rate), and a run is not waited on as a PR is.
    profile = profile_cases(
        cases,
        work / "ncu",
        full=options.ncu_full,
        sections=choose_sections("all"),
        timeout_s=options.ncu_timeout_s,
        kernels_root=checkout,
        gpu_name=gpu_name,
        deadline=options.deadline,
    )
    profiled = {c.variant for c in cases if any(r.case_id == c.id for r in profile.kernel_rows)}
    if profiled:  # the binaries those kernels came from, for stored causes (ci/ncu/sass_record.py)
        from attnwatch.ci.ncu.sass_record import record_sass

        compiled: dict[str, set[str]] = {}  # variant -> the binaries its profiled cases compiled at run time
        for c in cases:
            digest = (state.timings.get(c.id) or {}).get("kernel_binary_sha256")
            if c.variant in profiled and digest:
                compiled.setdefault(c.variant, set()).add(digest)
        profile.sass, why = record_sass(profiled, checkout, work / "sass", compiled_at_run_time=compiled)
        if why:
            profile.notes.append(f"static code not recorded: {why}")
    return profile


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL_CHARS:].strip()


def _remove_tree(path: Path) -> None:
    """Delete the work dir; rmtree removes the kernels symlink, never what it points to."""
    shutil.rmtree(path, ignore_errors=True)


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
