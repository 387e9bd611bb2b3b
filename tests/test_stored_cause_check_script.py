"""scripts/stored_cause_check.py's own logic on the CPU, so a slip cannot cost the GPU call: an
alerted case agrees when its stored cause leads with the code part of the compare's cause for the
same case (the H200's recorded barrier plant: tests/data/ncu/plants/barrier_at1), only latency
alerts are judged, and an unknown plant is refused by name."""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import stored_cause_check  # noqa: E402


@pytest.fixture(scope="module")
def report(fixtures_dir) -> dict:
    return json.loads(
        gzip.decompress((fixtures_dir / "ncu" / "plants" / "barrier_at1" / "compare.json.gz").read_bytes())
    )


def explained(report: dict) -> dict[str, str]:
    return {
        c["case_id"]: c["explanation"]["cause"] for c in report["cases"] if (c.get("explanation") or {}).get("cause")
    }


def test_the_code_part_is_the_causes_first_clause(report):
    causes = explained(report)
    assert causes, "the recorded compare explained no case"
    for cause in causes.values():
        part = stored_cause_check.code_part(cause)
        assert part and "BAR" in part and ";" not in part, cause
    assert stored_cause_check.code_part(None) is None and stored_cause_check.code_part("") is None


def test_a_stored_cause_agrees_only_when_it_leads_with_the_compares_code_part(report):
    (case, cause), *_ = explained(report).items()
    other_cost = stored_cause_check.code_part(cause) + "; about 0.5 of the +1.0 µs"  # the history's own medians
    stored = [
        {"alert": 1, "case": case, "kind": "regression", "metric": "median_us", "cause": other_cost},
        {"alert": 2, "case": case, "kind": "regression", "metric": "gap_to_baseline", "cause": other_cost},
        {
            "alert": 3,
            "case": "cuda_wmma/none/fp16/noncausal",
            "kind": "regression",
            "metric": "median_us",
            "cause": None,
        },
    ]
    rows = stored_cause_check.judged(stored, report)
    assert [(r["alert"], r["agree"]) for r in rows] == [(1, True), (3, False)]  # the latency's alerts only
    assert rows[0]["compare_cause"] == cause
    without_code = [{**stored[0], "cause": "the instruction count rose"}]
    assert [r["agree"] for r in stored_cause_check.judged(without_code, report)] == [False]
    assert [r["agree"] for r in stored_cause_check.judged(stored[:1], None)] == [False]  # no compare: nothing agrees


def test_an_unknown_plant_is_refused_by_name(tmp_path):
    with pytest.raises(SystemExit) as refused:
        stored_cause_check.main(["--device", "cpu", "--plant", "no_such", "--out", str(tmp_path)])
    assert "no plant named 'no_such'" in str(refused.value) and "barrier" in str(refused.value)


def test_a_module_ingest_or_detect_needs_is_named_before_any_run():
    assert stored_cause_check.missing_module() is None  # this machine has them all
    missing = stored_cause_check.missing_module(("json", "attnwatch.history.no_such_module"))
    assert missing is not None and missing.startswith("attnwatch.history.no_such_module: ")


def test_children_find_this_checkout_first_and_the_callers_path_after_it(monkeypatch, tmp_path):
    from attnwatch.scripts.script_env import checkout_env

    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    env = checkout_env(ATTNWATCH_DB="h.duckdb")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(REPO), str(tmp_path)]
    assert env["ATTNWATCH_DB"] == "h.duckdb"
    monkeypatch.delenv("PYTHONPATH")
    assert checkout_env()["PYTHONPATH"] == str(REPO)
