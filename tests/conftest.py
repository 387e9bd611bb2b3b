"""Shared fixtures: real DuckDB files in tmp dirs, the recorded H200 data, GPU marks.

Tests read only inside the checkout: the recorded data is `tests/data` (its README says
where, when and how each file was recorded).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import worker_groups

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "data"
# The history's repository setting (history/contract/repository.py): the tests' bundles name their own
# repository, and a test that wants the setting sets it; an operator's value must not leak in.
os.environ.pop("ATTNWATCH_REPO", None)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _has_cuda()


# The temporary directories of this session: every test and every child process it starts makes
# its temp dirs here (TMPDIR), so what they leave behind is found at the end, apart from any other
# run on the machine. pytest's own tmp_path stays under the system temp directory.
_SESSION_TMP: list[Path] = []
# The kinds made by history.temp_dirs.owned_temp_dir (lake links, run work dirs, query spill
# dirs, compare checkouts): each is swept by the next process that makes one of its kind.
TEMP_PREFIXES = ("attnwatch-ext-", "attnwatch-run-", "attnwatch-sql-", "attnwatch-base-", "attnwatch-head-")


# What pytest-xdist tells its workers in the environment: the processes a test starts would inherit
# it, and pytest-benchmark switches itself off in a child pytest that sees it. A test's children get
# the environment a user's shell gives them (the workers still know themselves by config.workerinput).
XDIST_ENVIRONMENT = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def pytest_configure(config):
    for name in XDIST_ENVIRONMENT:
        os.environ.pop(name, None)
    if _SESSION_TMP:
        return
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    _SESSION_TMP.append(Path(tempfile.mkdtemp(prefix="attnwatch-tests-")))
    _SESSION_TMP[0].chmod(0o1777)  # as /tmp is: the PostgreSQL server runs as its own user
    os.environ["TMPDIR"] = str(_SESSION_TMP[0])
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    # Where a command saves the traceback of an unexpected exception (history/crash_log.py): this
    # session's, never the user's ~/.local/state.
    os.environ["XDG_STATE_HOME"] = str(_SESSION_TMP[0] / "xdg-state")
    # The caches (compiled binaries, float64 references, Triton choices): this session's unless the
    # user named a folder, never their ~/.cache.
    os.environ.setdefault("ATTNWATCH_CACHE", str(_SESSION_TMP[0] / "cache"))
    if config.getoption("dist", "no") == "loadgroup":  # the controller, before its workers start
        (_SESSION_TMP[0] / "worker-groups").mkdir()
        os.environ[worker_groups.GROUPS_ENV] = str(_SESSION_TMP[0] / "worker-groups")


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when the code under test left temporary directories behind.

    A process that was killed (the fault tests SIGKILL runs, workers and query children) runs no
    clean-up; its directories are swept by the next attnwatch process, as on a user's machine
    (history/temp_dirs.py), so they are swept here first; this process's own are removed at its
    exit. What remains is a leak: a directory nothing removes, or one of a process that is still
    running after the tests.
    """
    if not _SESSION_TMP:
        return
    from attnwatch.history.sql.server import close_idle
    from attnwatch.history.temp_dirs import sweep_stale

    close_idle()  # the user-SQL servers this process started: each removes its extension folder

    root = _SESSION_TMP[0]
    for prefix in TEMP_PREFIXES:
        sweep_stale(prefix, root)
    ours = tuple(f"{prefix}{os.getpid()}-" for prefix in TEMP_PREFIXES)  # removed at this process's exit
    left = sorted(p.name for p in root.glob("attnwatch-*") if not p.name.startswith(ours))
    shutil.rmtree(root, ignore_errors=True)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"temporary directories left behind by this run ({len(left)}): {', '.join(left[:20])}"
        if reporter is not None:
            reporter.write_line(line, red=True)
        if session.exitstatus == 0:
            session.exitstatus = 1


# The tmp_path folders of this process's failed tests: all that a failed session keeps.
_FAILED_TMP: set[Path] = set()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and "tmp_path" in getattr(item, "funcargs", {}):
        _FAILED_TMP.add(Path(item.funcargs["tmp_path"]))
    return report


@pytest.fixture(scope="session", autouse=True)
def keep_only_failed_tests_folders(request, tmp_path_factory):
    """pytest removes a passing test's tmp_path, and a passing session's whole base folder; a
    failed session would keep every module and session fixture's folder too (histories, builds,
    servers' data: gigabytes). At this process's end, only its failed tests' folders stay."""
    yield
    if not request.session.testsfailed:
        return
    base = tmp_path_factory.getbasetemp()
    for entry in base.iterdir():
        if entry.is_symlink() or entry in _FAILED_TMP:  # pytest's "<name>current" links to the newest
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@pytest.fixture(scope="session", autouse=True)
def streamlit_components_scanned_once():
    """Each new AppTest has Streamlit (1.67) scan every installed distribution's metadata for
    components: ~0.4-0.8 s a time, over half the time of the page tests' renders. The dashboard's
    server does it once per process; the installed packages do not change during a test session,
    so the session's AppTests share one scan too."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # streamlit missing or laid out otherwise: every scan runs as usual
        yield
        return
    original = manifest_scanner.scan_component_manifests
    manifest_scanner.scan_component_manifests = functools.cache(original)
    try:
        yield
    finally:
        manifest_scanner.scan_component_manifests = original


@pytest.fixture
def remove_kept_run_dirs():
    """For tests whose runs lose cases on purpose: the work dir such a run keeps for the user
    (child logs and journals, marked kept) is what they test; it is removed afterwards."""
    from attnwatch.ci.supervisor import RUN_DIR_PREFIX
    from attnwatch.history.temp_dirs import KEPT_MARKER

    def kept() -> set[Path]:
        return {p.parent for p in Path(tempfile.gettempdir()).glob(f"{RUN_DIR_PREFIX}*/{KEPT_MARKER}")}

    before = kept()
    yield
    for path in kept() - before:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (runs on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


# `make test`'s split over pytest-xdist workers (--dist loadgroup): tests/worker_groups.py.
@pytest.hookimpl(tryfirst=True)  # before pytest-xdist sends the collection to the controller
def pytest_collection_finish(session):
    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker and session.config.getoption("loadgroup", False) and worker_groups.GROUPS_ENV in os.environ:
        worker_groups.record(worker_groups.order_and_group(session.items, HAS_CUDA), worker)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "loadgroup":
        return worker_groups.FileGroupScheduling(config, log)
    return None


@pytest.fixture(scope="session")
def attnwatch_wheel(tmp_path_factory, request) -> Path:
    """This checkout's wheel, built once per session (tests/wheel_env.py); under pytest-xdist the
    workers share the session's base directory, and the first to need it builds it there."""
    import fcntl

    from wheel_env import build_wheel

    shared = tmp_path_factory.getbasetemp()
    if hasattr(request.config, "workerinput"):
        shared = shared.parent  # each worker's base directory is inside the run's
    folder = shared / "wheel"
    with open(shared / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(folder.glob("attnwatch-*.whl"))
        if built:
            return built[0]
        folder.mkdir(exist_ok=True)
        return build_wheel(folder)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The recorded real outputs (tests/data: ncu CSVs, H200 timing samples, old pytest-benchmark JSON)."""
    return FIXTURES


@pytest.fixture
def db_path(tmp_path, monkeypatch) -> Path:
    """A fresh history file path; ATTNWATCH_DB points at it for the test's duration."""
    path = tmp_path / "history.duckdb"
    monkeypatch.setenv("ATTNWATCH_DB", str(path))
    return path


def started_postgres():
    """A new real PostgreSQL server (tests/pg_server.py) for a fixture to yield, stopped after;
    the test is skipped with the reason where none can start."""
    import pg_server

    reason = pg_server.why_unavailable()
    if reason:
        pytest.skip(f"lake tests need a PostgreSQL server: {reason}")
    server = pg_server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL server for the session, stopped at the end."""
    yield from started_postgres()


_LAKE_COUNTER = iter(range(1, 1_000_000))


@pytest.fixture
def lake_db(postgres_server, tmp_path, monkeypatch) -> str:
    """A new, empty lake: its own catalog database on the session's server, data under tmp_path.
    ATTNWATCH_DB names it and ATTNWATCH_LAKE_DATA its data path for the test's duration."""
    name = postgres_server.create_database(f"lake_{os.getpid()}_{next(_LAKE_COUNTER)}")
    location = f"ducklake:postgres:{postgres_server.dsn(name)}"
    monkeypatch.setenv("ATTNWATCH_DB", location)
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", str(tmp_path / "lake-data"))
    return location
