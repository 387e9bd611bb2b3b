"""`attnwatch variants`: the real command line, in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.kernels import registry

REPO_ROOT = Path(__file__).resolve().parent.parent


def _attnwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def listing() -> dict:
    done = _attnwatch("variants", "--json", "--shapes", "cpu")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_variants_json_lists_every_variant_with_availability(listing):
    document = listing
    rows = {row["name"]: row for row in document["variants"]}
    assert set(rows) == {v.name for v in registry.all_variants()}
    assert rows["sdpa"]["is_baseline"] and rows["sdpa"]["operator"] == "attention" and rows["sdpa"]["available"]
    assert rows["torch_3op"]["lineage"].startswith("cuBLAS 3-kernel")
    for row in rows.values():
        assert row["available"] == (row["reason"] is None)
        assert set(row) >= {"family", "lineage", "needs", "description"}
    assert document["device"] and document["capabilities"]["torch_version"]


def test_variants_table_names_the_device_and_each_unavailable_reason(listing):
    done = _attnwatch("variants")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("device: ")
    assert lines[1].split()[:7] == ["name", "operator", "family", "baseline", "needs", "available", "lineage"]
    for row in listing["variants"]:
        if not row["available"]:
            assert f"{row['name']}: unavailable: {row['reason']}" in lines


def test_help_says_it_lists_every_operator_s_variants(listing):
    """The listing holds every operator's variants (RMSNorm's too), each row naming its operator;
    the help used to promise only attention variants."""
    assert {row["operator"] for row in listing["variants"]} >= {"attention", "rmsnorm"}
    done = _attnwatch("variants", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "every registered variant of every operator" in text and "attention variant" not in text


def test_shape_set_lists_each_skipped_case_with_its_reason(listing):
    assert listing["shape_set"] == "cpu"
    skipped = listing["skipped_cases"]
    assert set(skipped) == {row["name"] for row in listing["variants"]}
    assert skipped["sdpa"] == {}  # the baseline runs everywhere
    for row in listing["variants"]:
        if not row["available"]:  # every case of an unavailable variant, with the same reason
            # the cpu set's cases of its operator: attention's 2 dtypes x 2 modes, RMSNorm's 2 dtypes x fwd
            assert len(skipped[row["name"]]) == (4 if row["operator"] == "attention" else 2)
            assert set(skipped[row["name"]].values()) == {f"unavailable: {row['reason']}"}


def test_unknown_shape_set_is_a_clear_error(capsys):
    from attnwatch.cli.main import main

    assert main(["variants", "--shapes", "no_such_set"]) == 2
    assert "--shapes: unknown shape set 'no_such_set'" in capsys.readouterr().err
