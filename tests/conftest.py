"""Shared fixtures: real DuckDB files in tmp dirs, the recorded H200 data, GPU marks.

Tests read only inside the checkout: the recorded data is `tests/data` (its README says
where, when and how each file was recorded).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURES = REPO_ROOT / "tests" / "data"


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _has_cuda()


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (runs on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)


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
