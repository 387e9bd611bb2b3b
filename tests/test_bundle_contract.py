"""One bundle contract: what a kernel check measures reaches the history whole, through the one
writer production uses; an unknown or missing field is an error naming the file and field;
files of an older format still ingest through their upgrade functions."""

from __future__ import annotations

import json
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from bundle_factory import make_bundle
from attnwatch.ci.bundle_assembly import RunHead, write_bundle
from attnwatch.ci.environment import GitInfo
from attnwatch.ci.plan import plan_cases
from attnwatch.ci.records import UnmappedField, build_record, correctness_record
from attnwatch.ci.suite_state import SuiteState
from attnwatch.history.contract.bundle import Environment
from attnwatch.history.store.db import open_read
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.kernels.correctness import CheckResult, check_case
from attnwatch.kernels.registry import BuildReport, Prepared, Variant
from attnwatch.kernels.shapes import adhoc_shape
from attnwatch.history.store.location import parse_location

REPO_ROOT = Path(__file__).resolve().parent.parent
SHAPE = adhoc_shape(1, 2, 16, 64)
CASE = plan_cases(["sdpa"], [SHAPE], ["fp16"], [True])[0]
ENV = Environment(device_kind="cpu", hostname="runner", os="Linux", python_version="3.12.3")
GIT = GitInfo(sha="ab" * 20, branch="main", repo="example/kernels")


def _production_bundle(out: Path, records: list[dict], case=CASE) -> Path:
    """A bundle written the way `attnwatch run` writes one: journalled records (JSON, as a
    child sends them) applied to the parent's state, then ci.bundle_assembly."""
    state = SuiteState([case])
    state.apply({"kind": "correctness", "case": case.case_id, "records": json.loads(json.dumps(records))})
    state.apply({"kind": "outcome", "case": case.case_id, "status": "failed", "error": "not timed in this test"})
    return write_bundle(out, state, RunHead(GIT, ENV, "pr", "local", "2026-11-03T09:00:00Z", "2026-11-03T09:05:00Z"))


def _stored(db: Path) -> list[dict]:
    with open_read(parse_location(db)) as con:
        cursor = con.execute("SELECT * FROM correctness ORDER BY seed")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def _broken_prepare(case, device, seed):
    raise OSError("cubin not found")


def test_every_field_of_a_real_check_reaches_the_history(tmp_path):
    """A real check on this CPU, a passing and a failing one, through the production writer and
    ingest: each stored column is the value the check reported, none is dropped."""
    good = check_case("sdpa", CASE.to_case(), "cpu", seeds=(0, 1))
    broken = Variant("sdpa", "test", "prepare always raises", prepare=_broken_prepare)
    (failed,) = check_case(broken, CASE.to_case(), "cpu", seeds=(2,))
    bundle = _production_bundle(tmp_path / "bundle", [asdict(correctness_record(CASE, r)) for r in (*good, failed)])
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [bundle])
    rows = _stored(db)
    assert [r["seed"] for r in rows] == [0, 1, 2]
    for row, result in zip(rows, good):
        assert row["passed"] and row["profile"] == "normal" and row["calls"] == result.calls == 2
        assert (row["atol"], row["rtol"]) == (result.atol, result.rtol)
        assert row["max_abs_err"] == result.max_abs_err and row["rel_err"] == result.rel_err
        assert row["tolerance_used"] == result.tolerance_used and 0 < row["tolerance_used"] < 1
        assert row["violations"] == result.violations == 0 and row["nonfinite"] == 0
        assert row["worst_index"] is None
    last = rows[2]
    assert not last["passed"] and last["error"] == "prepare: OSError: cubin not found"
    # Nothing was compared: not measured (NULL), not "0 violations".
    assert last["max_abs_err"] is None and last["violations"] is None and last["nonfinite"] is None


def test_the_worst_element_of_a_failing_check_is_stored(tmp_path):
    def prepare(case, device, seed):
        import torch

        q, k, v = (
            torch.randn(1, 2, 16, 64, dtype=torch.float16, generator=torch.Generator().manual_seed(seed + i))
            for i in range(3)
        )
        out = torch.zeros_like(q)
        return Prepared(lambda: out.fill_(0.5), q, k, v, out=out)

    wrong = Variant("sdpa", "test", "writes 0.5 everywhere", prepare=prepare)
    (result,) = check_case(wrong, CASE.to_case(), "cpu", seeds=(0,))
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [_production_bundle(tmp_path / "b", [asdict(correctness_record(CASE, result))])])
    (row,) = _stored(db)
    assert not row["passed"] and row["violations"] == result.violations > 0
    assert list(row["worst_index"]) == list(result.worst_index) and row["tolerance_used"] == result.tolerance_used > 1


def test_an_rmsnorm_check_takes_its_operator_s_tolerances_and_stores_a_two_part_worst_index(tmp_path):
    from attnwatch.kernels.rmsnorm import model
    from attnwatch.kernels.shapes import SHAPES

    def prepare(case, device, seed):  # drops the weight: |w - 1| ~ 1, far outside any tolerance
        x, w = model.make_inputs(case.shape, case.dtype, case.mode, device, seed)
        return Prepared(lambda: model.reference64((x, w.new_ones(w.shape)), "fwd").to(x.dtype), inputs=(x, w))

    case = plan_cases(["rmsnorm_torch"], [SHAPES["rms_cpu_tiny"]], ["fp16"], [True])[0]
    wrong = Variant("rmsnorm_torch", "test", "drops the weight", prepare=prepare, operator="rmsnorm")
    (result,) = check_case(wrong, case.to_case(), "cpu", seeds=(0,))
    assert (result.atol, result.rtol) == (1e-3, 2e-3)  # kernels/rmsnorm/tolerances.toml, not attention's
    assert not result.passed and len(result.worst_index) == 2 and "worst at index = (" in result.error
    db = tmp_path / "history.duckdb"
    ingest_paths(
        parse_location(db), [_production_bundle(tmp_path / "b", [asdict(correctness_record(case, result))], case)]
    )
    (row,) = _stored(db)
    assert list(row["worst_index"]) == list(result.worst_index) and row["case_id"].endswith("/fwd")


@pytest.mark.parametrize(
    "change, field, message",
    [
        (lambda r: r.update(tolerance_margin=0.3), "records[0].tolerance_margin", "unknown field"),
        (lambda r: r.pop("violations"), "records[0].violations", "missing"),
        (lambda r: r.update(calls="two"), "records[0].calls", "expected an integer"),
    ],
)
def test_the_production_writer_refuses_what_the_reader_would(tmp_path, change, field, message):
    (result,) = check_case("sdpa", CASE.to_case(), "cpu", seeds=(0,))
    record = asdict(correctness_record(CASE, result))
    change(record)
    with pytest.raises(BundleError) as info:
        _production_bundle(tmp_path / "bundle", [record])
    assert info.value.path.endswith("correctness.json") and info.value.field == field
    assert message in info.value.message
    assert not (tmp_path / "bundle").exists()  # checked before anything was written


def test_a_field_kernels_adds_is_refused_not_dropped():
    @dataclass
    class CheckResultWithMore(CheckResult):
        headroom_bits: float = 0.0

    (result,) = check_case("sdpa", CASE.to_case(), "cpu", seeds=(0,))
    more = CheckResultWithMore(**asdict(result), headroom_bits=3.5)
    with pytest.raises(UnmappedField, match="CheckResultWithMore.headroom_bits"):
        correctness_record(CASE, more)


def test_every_field_of_a_build_report_is_stored():
    report = BuildReport(
        variant="cuda_wmma",
        ok=False,
        target="sm_90",
        compile_seconds=4.5,
        registers_per_thread=96,
        shared_mem_bytes=49152,
        spill_store_bytes=8,
        spill_load_bytes=12,
        stack_frame_bytes=16,
        source_hash="f00d" * 16,
        cached=True,
        config={"kernel": "attn_fwd"},
        log_tail="ptxas info",
        error="kernel 'attn_fwd' not in the ptxas report",
    )
    assert asdict(build_record(report)) == asdict(report)


def test_a_journalled_build_without_a_field_is_refused(tmp_path):
    state = SuiteState([CASE])
    record = asdict(build_record(BuildReport(variant="sdpa", ok=True)))
    del record["log_tail"]
    state.apply({"kind": "build", "record": record})
    state.apply({"kind": "outcome", "case": CASE.case_id, "status": "failed", "error": "not timed in this test"})
    with pytest.raises(BundleError) as info:
        write_bundle(
            tmp_path / "b", state, RunHead(GIT, ENV, "pr", "local", "2026-11-03T09:00:00Z", "2026-11-03T09:05:00Z")
        )
    assert info.value.path.endswith("builds.json") and info.value.field == "builds[0].log_tail"


def test_correctness_files_of_format_1_ingest_through_their_upgrade(tmp_path):
    """Correctness and builds in format 1 as earlier writers wrote them (a build record could
    leave fields out), and a real H200 run recorded in format 1 throughout (the demo sample until
    the demo became a history)."""
    sample = REPO_ROOT / "tests" / "data" / "bundles" / "h200-main-fp16-3225df5.tgz"
    with tarfile.open(sample) as archive:
        archive.extractall(tmp_path / "sample", filter="data")
    (recorded,) = (tmp_path / "sample").iterdir()
    assert json.loads((recorded / "correctness.json").read_text())["schema_version"] == 1
    repo = json.loads((recorded / "manifest.json").read_text())["repo"]  # one history, one repository
    bundle = make_bundle(tmp_path / "old", run_id="old-format", n_cases=2, repo=repo)
    path = bundle / "correctness.json"
    document = json.loads(path.read_text())
    v2_only = ("profile", "calls", "tolerance_used", "violations", "worst_index")
    document["records"] = [{k: v for k, v in r.items() if k not in v2_only} for r in document["records"]]
    del document["records"][0]["nonfinite"]  # optional in format 1
    document["schema_version"] = 1
    path.write_text(json.dumps(document))
    builds = {"schema": "attnwatch.builds", "schema_version": 1, "builds": [{"variant": "cuda_wmma", "ok": True}]}
    (bundle / "builds.json").write_text(json.dumps(builds))  # format 1: every field but two optional
    db = tmp_path / "history.duckdb"
    assert len(ingest_paths(parse_location(db), [recorded, bundle]).inserted) == 2
    rows = _stored(db)  # the sample was recorded without correctness checks: these are the factory's
    assert len(rows) == 4 and {r["nonfinite"] for r in rows} == {0}
    assert all(r[name] is None for r in rows for name in v2_only)
    with open_read(parse_location(db)) as con:
        assert con.execute(
            "SELECT ok, target, cached, log_tail, registers_per_thread FROM builds WHERE run_id = 'old-format'"
        ).fetchall() == [(True, "", False, "", None)]
