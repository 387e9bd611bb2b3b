"""Fuzzing the command line (issue 39): hostile and careless inputs through the real `attnwatch`.

Seeded (hypothesis, derandomized: the same cases every run) and bounded (FUZZ_EXAMPLES per kind
of input, no shrinking; ATTNWATCH_FUZZ_SCALE=N draws N times as many for a longer local run),
through `attnwatch.cli.main.main` in this process with its file descriptors captured, and a few
cases through real subprocesses as a shell runs them. Inputs: run bundles and pytest-benchmark files given to `ingest` (mutated
by tests/fuzz_inputs.py), compare.json given to `comment`, PR events given to `comment
--workflow-run-event` (against the loopback GitHub of tests/github_stub.py), SQL text given to
`sql`, and history locations given to `--db`.

Every case fails on: a Python traceback on stdout or stderr; an exit status other than 0, 1, 2
(70, an internal error, is a defect found); a refusal that is not one line; a control character
(history.terminal_text) reaching stdout or stderr; exit 0 for an input that must be refused
(fuzz_inputs.Mutation.must_refuse); and any change to the history's directory, the input's or
the working directory by a command that refused (every file's bytes compared before and after).
An accepted ingest is followed by `sql --format csv` of what it stored, which must not bring a
control character back either.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from attnwatch.cli.main import main
from attnwatch.history.terminal_text import has_unsafe
from bundle_factory import make_bundle, make_pytest_benchmark_file
from fuzz_inputs import mutations, pending
from github_stub import GitHubStub, StubState

pytestmark = pytest.mark.fuzz
# hypothesis keeps caches under ./.hypothesis by default: the checkout. This session's temp dir instead.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "hypothesis")
REPO_ROOT = Path(__file__).resolve().parent.parent
FUZZ_EXAMPLES = {"bundle": 30, "pytest-benchmark": 12, "compare": 40, "event": 40, "sql": 25, "history path": 20}
ALLOWED_EXITS = (0, 1, 2)
_SETTINGS = dict(
    derandomize=True,
    database=None,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


# A longer run on a developer's machine: ATTNWATCH_FUZZ_SCALE=10 draws ten times as many cases.
SCALE = float(os.environ.get("ATTNWATCH_FUZZ_SCALE", "1"))


def fuzz(kind: str):
    return settings(max_examples=max(1, round(FUZZ_EXAMPLES[kind] * SCALE)), **_SETTINGS)


@dataclass
class Ran:
    code: int
    out: str
    err: str


def run(capfd, *argv: str) -> Ran:
    """`attnwatch ARGV` in this process; what it wrote on file descriptors 1 and 2."""
    capfd.readouterr()
    code = main(list(argv))
    out, err = capfd.readouterr()
    return Ran(code, out, err)


def snapshot(*roots: Path) -> dict[str, str]:
    """Every entry under `roots`: a file's sha256, a link's target, a directory's mark."""
    seen = {}
    for root in roots:
        for base, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(base) / name
                if path.is_symlink():
                    seen[str(path)] = "-> " + os.readlink(path)
                elif path.is_dir():
                    seen[str(path)] = "dir"
                else:
                    seen[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def problems(ran: Ran, must_refuse: bool, before: dict, after: dict) -> list[str]:
    found = []
    both = ran.out + ran.err
    if "Traceback (most recent call last)" in both:
        found.append("a traceback reached the terminal")
    if has_unsafe(ran.out) or has_unsafe(ran.err):
        found.append("a control character reached the terminal")
    if ran.code not in ALLOWED_EXITS:
        found.append(f"exit status {ran.code}")
    if must_refuse and ran.code == 0:
        found.append("accepted an input that must be refused")
    if ran.code == 2 and len(ran.err.strip().splitlines()) != 1:
        found.append("the refusal is not one line")
    if ran.code != 0 and before != after:
        changed = sorted(set(before.items()) ^ set(after.items()))
        found.append(f"a refused command changed files: {changed[:4]}")
    return found


def check(ran: Ran, what: str, must_refuse: bool, before: dict, after: dict) -> None:
    found = problems(ran, must_refuse, before, after)
    assert not found, (
        f"{what}: {'; '.join(found)} (exit {ran.code})\nstdout: {ran.out[-800:]!r}\nstderr: {ran.err[-1500:]!r}"
    )


@contextmanager
def workdir():
    """A fresh directory for one case, the working directory of the command inside it (`cwd`)."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-"))
    (root / "cwd").mkdir()
    previous = os.getcwd()
    os.chdir(root / "cwd")
    try:
        yield root
    finally:
        os.chdir(previous)
        shutil.rmtree(root, ignore_errors=True)


# --- ingest: run bundles and pytest-benchmark files ---------------------------------------------


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A history holding one run, and a second run's bundle and pytest-benchmark file to mutate."""
    root = tmp_path_factory.mktemp("fuzz-seed")
    options = dict(variants=("sdpa",), n_samples=5, n_cases=2)
    bundles = {
        "seed": make_bundle(root / "seed", run_id="fuzz-seed", **options),
        "case": make_bundle(root / "case", run_id="fuzz-case", seed=1, **options),
    }
    benchmarks = {
        "seed": make_pytest_benchmark_file(root / "seed.json", sha="1" * 40),
        "case": make_pytest_benchmark_file(root / "case.json", sha="2" * 40),
    }
    histories = {
        "bundle": root / "bundle-history" / "history.duckdb",
        "pytest-benchmark": root / "benchmark-history" / "history.duckdb",
    }
    for history, seed in ((histories["bundle"], bundles["seed"]), (histories["pytest-benchmark"], benchmarks["seed"])):
        history.parent.mkdir()
        assert main(["--db", str(history), "--repo", "example/attention-kernels", "ingest", str(seed)]) == 0
    return {"histories": histories, "bundle": bundles["case"], "pytest-benchmark": benchmarks["case"]}


def _ingest_case(capfd, seeded, fmt: str, name: str, mutation) -> None:
    with workdir() as root:
        history = root / "history" / "history.duckdb"
        shutil.copytree(seeded["histories"][fmt].parent, history.parent)
        source = seeded[fmt]
        target = root / "input" / source.name
        target.parent.mkdir()
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
        (target / name if target.is_dir() else target).write_bytes(mutation.data)
        before = snapshot(root)
        ran = run(capfd, "--db", str(history), "ingest", str(target))
        check(ran, f"{mutation.kind} in {mutation.where}", mutation.must_refuse, before, snapshot(root))
        if ran.code == 0 and mutation.kind == "hostile text":  # what was stored comes back to a terminal escaped
            shown = run(capfd, "--db", str(history), "sql", "--format", "csv", "SELECT * FROM runs")
            check(shown, f"the stored run of {mutation.kind} in {mutation.where}", False, {}, {})


BUNDLE_FILES = (
    "manifest.json",
    "timings.json",
    "outcomes.json",
    "correctness.json",
    "builds.json",
    "samples.json",
    "benchmark.json",
)


@fuzz("bundle")
@given(data=st.data())
def test_mutated_bundles(capfd, seeded, data):
    name = data.draw(st.sampled_from(BUNDLE_FILES), label="file")
    doc = json.loads((seeded["bundle"] / name).read_text())
    mutation = data.draw(mutations(doc, name, "bundle", strict=name != "benchmark.json"), label="mutation")
    _ingest_case(capfd, seeded, "bundle", name, mutation)


@fuzz("pytest-benchmark")
@given(data=st.data())
def test_mutated_pytest_benchmark_files(capfd, seeded, data):
    doc = json.loads(seeded["pytest-benchmark"].read_text())
    mutation = data.draw(mutations(doc, "case.json", "pytest-benchmark", strict=False), label="mutation")
    _ingest_case(capfd, seeded, "pytest-benchmark", "case.json", mutation)


# --- comment: compare.json and the workflow_run event ------------------------------------------

REPO = "octo/kernels"
HEAD = "c" * 40  # compare_factory's head SHA


@pytest.fixture(scope="module")
def report(fixtures_dir, tmp_path_factory):
    from attnwatch.ci.compare.report import write_report
    from compare_factory import make_report

    return write_report(make_report(fixtures_dir), tmp_path_factory.mktemp("fuzz-report") / "compare.json")


@fuzz("compare")
@given(data=st.data())
def test_mutated_compare_reports(capfd, report, monkeypatch, data):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    mutation = data.draw(
        mutations(json.loads(report.read_text()), "compare.json", "compare", strict=True), label="mutation"
    )
    with workdir() as root:
        compare = root / "compare.json"
        compare.write_bytes(mutation.data)
        before = snapshot(root)
        ran = run(capfd, "comment", "--compare", str(compare), "--dry-run")
        check(ran, f"{mutation.kind} in {mutation.where}", mutation.must_refuse, before, snapshot(root))


def genuine_event() -> dict:
    """The workflow_run event of gpu-bench finished on same-repository PR #7 (tests/test_comment_provenance.py)."""
    run_ = {
        "id": 4242,
        "run_attempt": 1,
        "name": "gpu-bench",
        "event": "pull_request",
        "status": "completed",
        "conclusion": "failure",
        "head_sha": HEAD,
        "head_branch": "tune-tiles",
        "path": ".github/workflows/gpu-bench.yml",
        "display_title": "Tune tiles",
        "html_url": f"https://github.com/{REPO}/actions/runs/4242",
        "repository": {"full_name": REPO},
        "head_repository": {"full_name": REPO},
        "pull_requests": [{"number": 7, "head": {"sha": HEAD}}],
    }
    return {"action": "completed", "workflow_run": run_, "repository": {"full_name": REPO, "default_branch": "main"}}


@pytest.fixture(scope="module")
def github():
    pulls = [{"number": 7, "state": "open", "head": {"sha": HEAD, "repo": {"full_name": REPO}}}]
    with GitHubStub(StubState(repo=REPO, pulls=pulls)) as stub:
        yield stub


@fuzz("event")
@given(data=st.data())
def test_mutated_pull_request_events(capfd, report, github, monkeypatch, data):
    mutation = data.draw(mutations(genuine_event(), "event.json", "event", strict=False), label="mutation")
    with workdir() as root:
        outputs = root / "github_output"
        outputs.write_text("")
        for key, value in {
            "GITHUB_API_URL": github.url,
            "GITHUB_REPOSITORY": REPO,
            "GITHUB_TOKEN": "ghs_fuzzTOKEN0123",
            "GITHUB_OUTPUT": str(outputs),
        }.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
        event = root / "event.json"
        event.write_bytes(mutation.data)
        before, posted = snapshot(root), len(github.state.requests)
        ran = run(capfd, "comment", "--compare", str(report), "--workflow-run-event", str(event))
        check(ran, f"{mutation.kind} in {mutation.where}", mutation.must_refuse, before, snapshot(root))
        if ran.code != 0:
            assert all(r["method"] == "GET" for r in github.state.requests[posted:]), "a refused event posted"


# --- sql: the text of a query -------------------------------------------------------------------

CONTROL = (0, 7, 8, 13, 27, 127, 133, 155, 0x202E, 0x2028)
VALUES = (
    "1",
    "-9223372036854775808",
    "170141183460469231731687303715884105727::HUGEINT",
    "1e308 * 10",
    "'nan'::DOUBLE",
    "'-inf'::DOUBLE",
    "[1, 2, NULL]",
    "{'a': chr(27), 'b': [chr(0)]}",
    "MAP {chr(27): 1}",
    "INTERVAL 3 DAY",
    "'2026-01-01 00:00:00+05'::TIMESTAMPTZ",
    "'\\x00\\xff'::BLOB",
    "repeat('ab', 50000)",
    "NULL",
    "'ｓdpa' || chr(8238)",
    "'line' || chr(10) || 'break'",
    "1::UTINYINT - 2",
    "1 / 0",
    "'x'::INTEGER",
)
ALIASES = ("v", '"\x1b[2J"', '"a\x00b"', '"\u202e x"', '"new\nline"', "v, 2 AS v")
TABLES = (
    "runs",
    "results",
    "latest_results",
    "case_series",
    "alerts",
    "alert_events",
    "schema_migrations",
    "information_schema.tables",
    "nosuch",
)
HOSTILE_SQL = (
    "COPY runs TO 'out.csv'",
    "ATTACH 'other.duckdb' AS o",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET memory_limit = '64GB'",
    "PRAGMA database_list",
    "SELECT * FROM read_csv('/etc/passwd')",
    "CREATE TABLE t (a INT)",
    "DROP TABLE runs",
    "DELETE FROM runs",
    "UPDATE runs SET run_id = 'x'",
    "CALL enable_logging(storage='file', storage_path='logs')",
    "SELECT * FROM duckdb_settings()",
    "SELECT 1; SELECT 2",
    ";",
    "SELECT",
    "CHECKPOINT",
    "EXPORT DATABASE 'dump'",
    "SELECT getenv('HOME')",
    "SELECT * FROM glob('*')",
    "SELECT current_setting('temp_directory')",
    "-- only a comment",
    "SELECT * FROM query('SELECT 1')",
    "SELECT count(*) FROM range(100000000000)",
)
SQL_TEXT = st.one_of(
    st.builds(
        lambda c, a: f"SELECT 'x' || chr({c}) || '[31m' AS {a}", st.sampled_from(CONTROL), st.sampled_from(ALIASES)
    ),
    st.builds(lambda v, a: f"SELECT {v} AS {a}", st.sampled_from(VALUES), st.sampled_from(ALIASES)),
    st.builds(lambda t, n: f"SELECT * FROM {t} LIMIT {n}", st.sampled_from(TABLES), st.sampled_from((0, 1, 5, -1))),
    st.sampled_from(HOSTILE_SQL),
    st.text(alphabet=st.sampled_from("SELECT FROM ( ) ' \" ; , * 1 a \x1b \x00 \u202e \n"), max_size=40),
)


@fuzz("sql")
@given(text=SQL_TEXT, fmt=st.sampled_from(("table", "csv", "json")))
def test_sql_text(capfd, seeded, text, fmt):
    with workdir() as root:
        history = root / "history" / "history.duckdb"
        shutil.copytree(seeded["histories"]["bundle"].parent, history.parent)
        before = snapshot(root)
        ran = run(capfd, "--db", str(history), "sql", "--format", fmt, "--timeout", "5", text)
        after = snapshot(root)
        check(ran, f"sql {text!r}", False, before, after)
        assert before == after, f"sql {text!r} changed files (user SQL is read-only)"


# --- --db: where the history is said to be ------------------------------------------------------


def _sqlite(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(4080))


def _link_loop(path: Path) -> None:
    path.symlink_to(path.with_name("loop-b"))
    path.with_name("loop-b").symlink_to(path)


HISTORY_PATHS = {  # kind -> (make it under the case's directory, the --db text given the directory)
    "a missing directory": (None, lambda d: str(d / "nohist" / "history.duckdb")),
    "a directory": (lambda p: p.mkdir(), None),
    "a dangling symbolic link": (lambda p: p.symlink_to(p.with_name("gone")), None),
    "a symbolic link loop": (_link_loop, None),
    "an empty file": (lambda p: p.write_bytes(b""), None),
    "a text file": (lambda p: p.write_text("not a history\n"), None),
    "a SQLite file": (_sqlite, None),
    "random bytes": (lambda p: p.write_bytes(bytes(range(256)) * 64), None),
    "control characters in the name": (None, lambda d: str(d / "h\x1b[31m\x07.duckdb")),
    "a name too long": (None, lambda d: str(d / ("x" * 300 + ".duckdb"))),
    "a trailing slash": (None, lambda d: str(d / "history.duckdb") + "/"),
    "below a file": (lambda p: p.write_text("x"), lambda d: str(d / "target" / "history.duckdb")),
    "a MotherDuck name": (None, lambda d: "md:x"),
    "an http URL": (None, lambda d: "http://127.0.0.1:9/x.duckdb"),
    "a malformed lake": (None, lambda d: "ducklake:nonsense"),
    "nothing": (None, lambda d: ""),
}
PATH_COMMANDS = (
    ("sql", "SELECT 1"),
    ("detect", "--dry-run"),
    ("alerts", "list"),
    ("migrate", "--check"),
    ("export", "{out}"),
    ("history", "recover"),
)


@fuzz("history path")
@given(
    kind=st.sampled_from(sorted(set(HISTORY_PATHS) - set(pending("history path")))),
    command=st.sampled_from(PATH_COMMANDS),
)
def test_history_paths(capfd, kind, command):
    make, name = HISTORY_PATHS[kind]
    with workdir() as root:
        where = root / "place"
        where.mkdir()
        if make is not None:
            make(where / "target")
        db = name(where) if name is not None else str(where / "target")
        argv = [a.format(out=root / "export") for a in command]
        before = snapshot(root)
        ran = run(capfd, "--db", db, *argv)
        check(ran, f"--db {kind} ({db[:60]!r}) {' '.join(command)}", True, before, snapshot(root))


# --- real processes -----------------------------------------------------------------------------


def _cli(*args: str, cwd: Path, module: str = "attnwatch", **environ: str) -> Ran:
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT) + (os.pathsep + path if path else ""), **environ)
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, cwd=cwd, env=env, timeout=180)
    return Ran(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))


@settings(max_examples=2, **_SETTINGS)
@given(data=st.data())
def test_mutated_bundles_in_real_processes(seeded, data):
    name = data.draw(st.sampled_from(BUNDLE_FILES[:3]), label="file")
    doc = json.loads((seeded["bundle"] / name).read_text())
    mutation = data.draw(mutations(doc, name, "bundle", strict=True), label="mutation")
    with workdir() as root:
        history = root / "history" / "history.duckdb"
        shutil.copytree(seeded["histories"]["bundle"].parent, history.parent)
        bundle = root / "input" / "bundle"
        shutil.copytree(seeded["bundle"], bundle)
        (bundle / name).write_bytes(mutation.data)
        before = snapshot(root)
        ran = _cli("--db", str(history), "ingest", str(bundle), cwd=root / "cwd")
        check(ran, f"{mutation.kind} in {mutation.where}", mutation.must_refuse, before, snapshot(root))


def test_hostile_inputs_of_every_kind_in_real_processes(seeded, report):
    """One of each kind through `python -m attnwatch` (and compare's own entry point)."""
    with workdir() as root:
        history = root / "history" / "history.duckdb"
        shutil.copytree(seeded["histories"]["bundle"].parent, history.parent)
        deep = root / "input" / "deep.json"
        deep.parent.mkdir()
        deep.write_text("[" * 100_000 + "]" * 100_000)
        cases = [
            ("comment", "--compare", str(deep), "--dry-run"),
            ("--db", str(history), "sql", "--format", "csv", "SELECT 'a' || chr(27) || '[2J' || chr(0) AS \"\x1b\""),
            ("--db", str(history), "sql", "CALL enable_logging(storage='file', storage_path='logs')"),
            ("--db", str(root / "input"), "detect"),
            ("--db", str(history), "ingest", str(root / "input" / "no\x1b[31mbundle")),
        ]
        for args in cases:
            before = snapshot(root)
            ran = _cli(*args, cwd=root / "cwd")
            check(ran, " ".join(args)[:120], False, before, snapshot(root))
        before = snapshot(root)
        ran = _cli(
            "comment",
            "--compare",
            str(report),
            "--workflow-run-event",
            str(deep),
            cwd=root / "cwd",
            GITHUB_TOKEN="ghs_fuzzTOKEN0123",
            GITHUB_REPOSITORY=REPO,
            GITHUB_API_URL="http://127.0.0.1:9",
        )
        check(ran, "comment --workflow-run-event <100,000 deep>", True, before, snapshot(root))
        before = snapshot(root)
        ran = _cli("compare", "--base", "no-such-ref\x1b[2J", cwd=root / "cwd")
        check(ran, "python -m attnwatch compare --base <hostile>", True, before, snapshot(root))


# --- what the fuzzer found, each pinned ----------------------------------------------------------


def test_a_pull_request_list_of_the_wrong_type_is_refused(capfd, report, github, monkeypatch, tmp_path):
    """`workflow_run.pull_requests: -1` ended in a TypeError traceback; `[[[…]]]` 100,000 deep in a
    RecursionError (the event was read with plain json.loads)."""
    for key, value in {
        "GITHUB_API_URL": github.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": "ghs_fuzzTOKEN0123",
    }.items():
        monkeypatch.setenv(key, value)
    event = genuine_event()
    event["workflow_run"]["pull_requests"] = -1
    (tmp_path / "event.json").write_text(json.dumps(event))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    for name, reason in (
        ("event.json", "workflow_run.pull_requests must be a list, got -1"),
        ("deep.json", "nested too deeply to read"),
    ):
        ran = run(capfd, "comment", "--compare", str(report), "--workflow-run-event", str(tmp_path / name))
        assert ran.code == 2 and len(ran.err.splitlines()) == 1 and reason in ran.err, ran.err


@pytest.mark.parametrize("command", [("sql", "SELECT 1"), ("detect",), ("export", "{out}")])
def test_a_history_name_too_long_or_a_link_loop_is_refused_in_one_line(capfd, tmp_path, command):
    """A name the file system refuses (ENAMETOOLONG) ended detect, alerts, migrate and export in an
    OSError traceback, a link loop `sql` in a RuntimeError from naming the history; export also
    made its output directory before finding there was no history."""
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    out = tmp_path / "export"
    for db in (tmp_path / ("x" * 300), tmp_path / "loop-a"):
        ran = run(capfd, "--db", str(db), *[a.format(out=out) for a in command])
        assert ran.code == 2 and len(ran.err.splitlines()) == 1 and "Traceback" not in ran.err, ran.err
        assert not out.exists()


def test_c1_controls_in_a_compare_report_do_not_reach_the_comment_or_the_terminal(capfd, report, monkeypatch, tmp_path):
    """A case id holding C1 controls (U+0085, U+009B: CSI on a terminal that honours 8-bit
    controls) passed compare.json's text rule and was printed raw by `comment --dry-run`."""
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    doc = json.loads(report.read_text())
    doc["cases"][0]["case_id"] = "c1\x85\x9b31mcsi"
    (tmp_path / "compare.json").write_text(json.dumps(doc))
    ran = run(capfd, "comment", "--compare", str(tmp_path / "compare.json"), "--dry-run")
    assert ran.code in (0, 2) and not has_unsafe(ran.out) and not has_unsafe(ran.err), (ran.code, ran.err)
