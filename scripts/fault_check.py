"""The fault battery of a history file: kill -9, a full disk, read-only, forbidden, busy, concurrent.

Every trial runs the real `attnwatch` CLI in a child process under one fault (tests/fault_env.py
says how each is made), then checks what the file holds, as DuckDB alone opens it (read-only;
the trial's history and this verdict: scripts/fault_trials.py):
  - it opens;
  - it holds every run whose ingest printed "inserted", each whole (all its result rows), and no
    run that was not ingested;
  - a failed command failed in one line (non-zero, no traceback, no PID or binary path);
and then that it takes writes again: an ingest of every bundle, in this process, after which each
run is there once. A run committed just before the kill but not yet reported may be there too:
the report is printed after the commit, never before.

Kinds (a trial each):
  kill -9 at statement K      every write statement of a first ingest into a new history, which
                              applies migrations 001..N one statement at a time, BEGIN and COMMIT
                              included; then of an ingest into a history at schema N-1
  kill -9 at a random time    a first ingest of three bundles, killed after a uniform random delay
  disk full at size L         a file-size limit (EFBIG, as ENOSPC) swept from 0 bytes to past
                              the final size: first ingests, and ingests into a history with runs
  full tmpfs, F bytes free    the history on a real 24 MiB tmpfs (tests/tmpfs_disk.py, as root)
                              with F swept from 0 to past what the command needs, at every stage:
                              first ingest, migration, later ingest, detect, alerts ack; the
                              error names no path but the history's
  malformed input             each broken bundle of tests/bad_bundles.py, given with a good one:
                              refused in one line naming its file and field, the history's
                              content (a hash per table) unchanged; a well-formed bundle of a
                              crashed kernel is stored
  read-only / permission / lock / concurrent   one trial per command they touch
  old WAL + recover           files left as attnwatch left them before checkpointing every commit
                              (killed at every statement); counted: how many DuckDB cannot open,
                              and whether `attnwatch history recover` then keeps every reported run

    python -m scripts.fault_check --workdir /some/scratch [--quick] [--seed 1] [--only tmpfs]

Prints the table (trial kind, trials, held, failed) and exits 1 if any trial failed. --quick runs
a sample of each kind (the CI test, tests/test_history_faults.py, runs a smaller one still).
"""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the shared test bundle factory and fault helpers

import fault_env  # noqa: E402
from bad_bundles import BAD_INPUTS, crashed_bundle  # noqa: E402
from fault_env import cli, content, file_size_limit, inspect, killed_at, one_line_error, other_paths, reported_inserted  # noqa: E402
from tmpfs_disk import on_full_tmpfs, tmpfs_unavailable  # noqa: E402

from attnwatch.scripts.fault_trials import RUNS, Tally, Trials, table, trial  # noqa: E402

# The stages a full tmpfs is tried at: (runs stored first, schema first, attnwatch arguments, runs attempted).
TMPFS_STAGES = {
    "first ingest": (0, None, ["ingest", "BUNDLES"], 3),
    "migration": (0, "N-1", ["migrate"], 0),
    "later ingest": (1, None, ["ingest", "BUNDLES"], 3),
    "detect": (3, None, ["detect"], 3),
    "alerts ack": (3, "detected", ["alerts", "ack", "1", "--note", "seen", "--by", "battery"], 3),
}


class Battery(Trials):
    """The kinds of fault, each adding its trials' verdicts to a Tally."""

    def kill_at_statements(self, tally: Tally, schema: int | None, sample: int | None) -> None:
        args = ["ingest", *map(str, self.bundles[:2])]
        count = fault_env.statement_count(killed_at(0, self.fresh(schema=schema), *args))
        points = self.statements(count, sample)
        for k in points:
            db = self.fresh(schema=schema)
            result = killed_at(k, db, *args)
            tally.add(self.held(db, reported_inserted(result.stdout), 2, result))

    def kill_at_random_times(self, tally: Tally, trials: int) -> None:
        args = ["ingest", *map(str, self.bundles)]
        started = time.monotonic()
        cli(self.fresh(), *args)
        full = time.monotonic() - started
        for _ in range(trials):
            db = self.fresh()
            child = subprocess.Popen(
                [sys.executable, "-m", "attnwatch", "--db", str(db), *args],
                env=fault_env.child_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            time.sleep(self.rng.uniform(0.2, full * 1.1))
            child.send_signal(signal.SIGKILL)
            out, err = child.communicate()
            tally.add(
                self.held(
                    db, reported_inserted(out), 3, subprocess.CompletedProcess(child.args, child.returncode, out, err)
                )
            )

    def disk_full(self, tally: Tally, seed_runs: int, steps: int) -> None:
        args = ["ingest", *map(str, self.bundles)]
        final = self.fresh(seed_runs)
        start_size = final.stat().st_size if final.exists() else 0
        cli(final, *args)
        limits = sorted(
            {start_size + int(i * (final.stat().st_size * 1.1 - start_size) / (steps - 1)) for i in range(steps)}
        )
        for limit in limits:
            db = self.fresh(seed_runs)
            result = cli(db, *args, preexec=file_size_limit(limit))
            reported = reported_inserted(result.stdout) | set(RUNS[:seed_runs])
            tally.add(self.held(db, reported, 3, result))

    def tmpfs_stage(self, stage: str) -> tuple[Path, list[str], int]:
        """A history made ready for `stage` in a `disk` directory: (it, the CLI arguments, runs attempted)."""
        from attnwatch.history.store.migrations import code_schema_version

        seed_runs, before, args, attempted = TMPFS_STAGES[stage]
        db = self.fresh(seed_runs, code_schema_version() - 1 if before == "N-1" else None, disk="disk")
        if before == "detected":  # run-c's correctness alert recorded, as id 1
            import contextlib
            import io

            from attnwatch.cli.main import main

            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["--db", str(db), "detect"]) == 0
        args = [a for arg in args for a in (map(str, self.bundles) if arg == "BUNDLES" else [arg])]
        return db, args, attempted

    def tmpfs_full(self, tally: Tally, stage: str, steps: int) -> None:
        """`stage` with its history on a tmpfs left F bytes free, F swept in `steps` values from 0
        to past what the command needs."""
        why = tmpfs_unavailable(self.workdir / "probe-tmpfs")
        if why:
            tally.failures.append(f"not run: {why}")
            return
        final, args, _ = self.tmpfs_stage(stage)
        before = sum(p.stat().st_size for p in final.parent.iterdir())
        cli(final, *args)
        # Checkpoints write new blocks before freeing old ones, and the log comes and goes: the
        # peak is well above the growth, so most steps run to three times it (and a MiB) free;
        # a later ingest may not grow the file at all (it reuses free blocks), so the last four
        # run on to three times half the file, where the command succeeds.
        after = sum(p.stat().st_size for p in final.parent.iterdir())
        low = 3 * (after - before) + 2**20
        high = max(low, 3 * (after // 2) + 2**20)
        frees = sorted(
            {int(i * low / (steps - 5)) for i in range(steps - 4)}
            | {int(low + i * (high - low) / 4) for i in range(1, 5)}
        )
        filled = 0
        for free in frees:
            db, args, attempted = self.tmpfs_stage(stage)
            result = on_full_tmpfs(db, free, *args)
            filled += "disk is full" in result.stderr
            tally.add(self.tmpfs_held(db, stage, result, attempted))
        if not filled:
            tally.failures.append(f"{stage}: the disk never filled at {frees} bytes free: nothing was tried")
        print(
            f"  {stage}: the disk filled in {filled} of {len(frees)} trials ({frees[0]}..{frees[-1]} bytes free)",
            file=sys.stderr,
            flush=True,
        )

    def tmpfs_held(self, db: Path, stage: str, result, attempted: int) -> str | None:
        seeded = TMPFS_STAGES[stage][0]
        failure = self.held(db, reported_inserted(result.stdout) | set(RUNS[:seeded]), attempted, result)
        if failure is None and result.returncode != 0 and (paths := other_paths(result.stderr, db)):
            failure = f"{trial(db)}: the error names {paths}: {result.stderr.strip()}"
        if failure is None and result.returncode != 0 and "disk is full" not in result.stderr:
            failure = f"{trial(db)}: the error does not say the disk is full: {result.stderr.strip()}"
        if failure is None and stage in ("detect", "alerts ack"):
            import duckdb

            con = duckdb.connect(str(db), read_only=True)
            alerts = con.execute("SELECT status FROM alerts").fetchall()
            con.close()
            done = [("open",)] if stage == "detect" else [("acknowledged",)]
            if (result.returncode == 0 and alerts != done) or len(alerts) > 1:
                failure = f"{trial(db)}: {stage} exited {result.returncode}; alerts hold {alerts}"
        return failure

    def malformed(self, tally: Tally, names: list[str] | None = None) -> None:
        """Each broken input given with a good bundle: refused whole, in one line naming its file and field."""
        good = self.bundles[1]
        for i, (name, make, file, field_name) in enumerate(BAD_INPUTS):
            if names is not None and name not in names:
                continue
            db = self.fresh(seed_runs=1)
            (db.parent / "bad").mkdir()
            bad = make(db.parent / "bad", 100 + i)
            before = content(db)
            result = cli(db, "ingest", str(good), str(bad))
            err = result.stderr.strip()
            failure = one_line_error(result)
            if failure is None and not (result.returncode == 2 and f"{file}: " in err and field_name in err):
                failure = f"does not name {file} and {field_name} (exit {result.returncode}): {err}"
            elif failure is None and (paths := other_paths(err, bad, good)):
                failure = f"names {paths}: {err}"
            elif failure is None and content(db) != before:
                failure = "the history changed"
            tally.add(failure and f"{trial(db)} ({name}): {failure}")
        if names is None:
            tally.add(self.crashed_stored())

    def crashed_stored(self) -> str | None:
        """A well-formed run in which a kernel crashed is stored, its case crashed and untimed."""
        db = self.fresh(seed_runs=1)
        bundle = crashed_bundle(db.parent / "crashed", 99)
        result = cli(db, "ingest", str(bundle))
        if result.returncode != 0:
            return f"{trial(db)}: a crashed kernel's run was refused: {result.stderr.strip()}"
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        statuses = con.execute(
            "SELECT status, count(*) FROM results WHERE run_id = 'bad-99' GROUP BY ALL ORDER BY 1"
        ).fetchall()
        con.close()
        return None if statuses == [("crashed", 1), ("ok", 3)] else f"{trial(db)}: the crashed run holds {statuses}"

    def read_only(self, tally: Tally) -> None:
        why = fault_env.read_only_unavailable(self.workdir / "probe-ro")
        if why:
            tally.failures.append(f"not run: {why}")
            return
        from attnwatch.history.store.migrations import code_schema_version

        for args, must_fail, seeded, schema in (
            (["ingest", str(self.bundles[1])], True, 1, None),
            (["sql", "SELECT count(*) FROM runs"], False, 1, None),
            (["migrate"], True, 0, code_schema_version() - 1),
        ):
            db = self.fresh(seed_runs=seeded, schema=schema)
            result = cli(db, *args, preexec=fault_env.read_only_mount(db.parent))
            failure = self.held(db, set(RUNS[:seeded]), 1, result, must_fail)
            if failure is None and must_fail and "read-only" not in result.stderr:
                failure = f"{trial(db)}: the error does not say read-only: {result.stderr.strip()}"
            tally.add(failure)

    def permission(self, tally: Tally) -> None:
        for mode, args in ((0o444, ["ingest", str(self.bundles[1])]), (0o000, ["sql", "SELECT count(*) FROM runs"])):
            db = self.fresh(seed_runs=1)
            db.chmod(mode)
            try:
                result = cli(db, *args, preexec=fault_env.no_permission_override())
            finally:
                db.chmod(0o644)
            failure = self.held(db, {RUNS[0]}, 1, result, must_fail=True)
            if failure is None and "permission denied" not in result.stderr:
                failure = f"{trial(db)}: the error does not say permission denied: {result.stderr.strip()}"
            tally.add(failure)

    def lock_held(self, tally: Tally) -> None:
        for args in (["ingest", "--lock-timeout", "0.5", str(self.bundles[1])], ["sql", "SELECT count(*) FROM runs"]):
            self.lock_held_once(tally, self.fresh(seed_runs=1), args)

    def lock_held_once(self, tally: Tally, db: Path, args: list[str]) -> None:
        """`args` while another process holds the history (run-a stored) for writing."""
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(600)",
                str(db),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            holder.stdout.readline()
            result = cli(db, *args)
        finally:
            holder.kill()
            holder.wait()
        failure = self.held(db, {RUNS[0]}, 1, result, must_fail=True)
        if failure is None and (
            str(db) not in result.stderr
            or "busy" not in result.stderr
            or f"held by process {holder.pid} (python" not in result.stderr
        ):
            failure = (
                f"{trial(db)}: the error does not name the history in full, say it is busy and name the "
                f"process holding it: {result.stderr.strip()}"
            )
        tally.add(failure)

    def concurrent(self, tally: Tally, trials: int) -> None:
        for _ in range(trials):
            db = self.fresh()
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "attnwatch",
                        "--db",
                        str(db),
                        "ingest",
                        "--lock-timeout",
                        "120",
                        *map(str, self.rng.sample(self.bundles, 2)),
                    ],
                    env=fault_env.child_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for _ in range(4)
            ]
            outputs = [c.communicate(timeout=600) for c in children]
            failure = next(
                (
                    f"{trial(db)}: an ingest failed: {err.strip()[-300:]}"
                    for c, (_, err) in zip(children, outputs)
                    if c.returncode != 0
                ),
                None,
            )
            reported = set().union(*(reported_inserted(out) for out, _ in outputs))
            state = inspect(db)
            stored = set(state.runs or {})
            tally.add(
                failure
                or (None if reported == stored else f"{trial(db)}: reported {reported}, stored {stored}")
                or self.held(db, reported, 3)
            )

    def legacy_wal(self, broken: Tally, recovered: Tally, sample: int | None) -> None:
        """Files as the old code left them (no checkpoint at commit), killed at every statement; then recover."""
        args = ["--legacy-wal", "ingest", *map(str, self.bundles[:2])]
        count = fault_env.statement_count(killed_at(0, self.fresh(), *args))
        for k in self.statements(count, sample):
            db = self.fresh()
            result = killed_at(k, db, *args)
            reported = reported_inserted(result.stdout)
            state = inspect(db)
            broken.add(None if state.opens else f"{trial(db)}: unopenable after kill at statement {k}")
            if state.opens:
                continue
            fixed = cli(db, "history", "recover")
            failure = None if fixed.returncode == 0 else f"{trial(db)}: recover: {fixed.stdout}{fixed.stderr}"
            recovered.add(failure or self.held(db, reported, 2))


def run(workdir: Path, quick: bool, seed: int, only: str | None = None) -> list[Tally]:
    """Every kind (or those whose name contains `only`), each kind's line printed to stderr when done."""
    from attnwatch.history.store.migrations import code_schema_version

    b = Battery(workdir, random.Random(seed))
    sample = 12 if quick else None
    kinds = [
        ("kill -9 at each statement: first ingest, migrations 001..N", lambda t: b.kill_at_statements(t, None, sample)),
        (
            "kill -9 at each statement: ingest into a history at schema N-1",
            lambda t: b.kill_at_statements(t, code_schema_version() - 1, sample),
        ),
        ("kill -9 at a random time: first ingest", lambda t: b.kill_at_random_times(t, 10 if quick else 40)),
        ("disk full (file-size limit): first ingest", lambda t: b.disk_full(t, 0, 10 if quick else 40)),
        (
            "disk full (file-size limit): ingest into a history with runs",
            lambda t: b.disk_full(t, 1, 10 if quick else 30),
        ),
        *(
            (f"disk full (24 MiB tmpfs): {stage}", lambda t, stage=stage: b.tmpfs_full(t, stage, 6 if quick else 20))
            for stage in TMPFS_STAGES
        ),
        ("malformed input (+ a crashed kernel's run stored)", b.malformed),
        ("read-only file system", b.read_only),
        ("permission denied", b.permission),
        ("lock held past --lock-timeout", b.lock_held),
        ("concurrent ingests (4 processes)", lambda t: b.concurrent(t, 1 if quick else 5)),
    ]
    tallies = []
    for kind, trials in kinds:
        if only is None or only in kind:
            tallies.append(_timed(Tally(kind), trials))
    if only is None or only in "old WAL":
        broken, recovered = (
            Tally("old WAL (before this fix): opens after kill -9"),
            Tally("old WAL: `history recover` keeps every reported run"),
        )
        _timed(broken, lambda t: b.legacy_wal(t, recovered, sample))
        tallies += [broken, recovered]
    return tallies


def _timed(tally: Tally, trials) -> Tally:
    started = time.monotonic()
    trials(tally)
    print(
        f"{tally.kind}: {tally.trials} trials, {tally.held} held, {len(tally.failures)} failed "
        f"({time.monotonic() - started:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="scratch directory (emptied first)")
    parser.add_argument("--quick", action="store_true", help="a sample of each kind")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="only the trial kinds whose name contains this text (e.g. tmpfs)")
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    started = time.monotonic()
    tallies = run(args.workdir, args.quick, args.seed, args.only)
    print(table(tallies))
    print(f"({time.monotonic() - started:.0f} s)")
    failed = False
    for t in tallies:
        for failure in t.failures[:5]:
            print(f"  {t.kind}: {failure}")
        failed |= bool(t.failures) and not t.kind.startswith("old WAL (before")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
