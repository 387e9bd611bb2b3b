"""Shared fixtures: real DuckDB files in tmp dirs, the recorded H200 data, GPU marks.

Tests read only inside the checkout: the recorded data is `tests/data` (its README says
where, when and how each file was recorded).
"""

from __future__ import annotations

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
