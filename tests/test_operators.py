"""Operators (kernels/operators.py): a second operator with its own shape type, modes, models,
baseline and references is planned, named, measured and stored as its declaration says, beside
attention, with no attention code path taken for it. The operator here is a toy declared in the
test (a memory-bound row copy), so the checks hold whatever operators the project ships."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import duckdb
import pytest

from attnwatch.ci.bisect.oracle import planned_cases
from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.timing.derived import apply_gaps, case_timing
from attnwatch.ci.timing.sampler import RawMeasurement
from attnwatch.history.contract.bundle import CaseTiming
from attnwatch.history.contract.bundle_upgrades import case_timing_v2_to_v3
from attnwatch.history.contract.timings import parse_case_timing
from attnwatch.history.ingest.rows import _timing_columns
from attnwatch.history.store.db import open_read, upgrade
from attnwatch.kernels import operators, registry, shapes
from attnwatch.kernels.cases import Case, case_id, parse_case_id
from attnwatch.kernels.variant import Prepared, Variant
from old_history import history_at_version
from attnwatch.history.store.location import parse_location


@dataclass(frozen=True)
class Rows:
    id: str
    rows: int
    hidden: int


TOY = operators.Operator(
    name="toyrows",
    modes=("fwd",),
    baseline="toy_base",
    references=("toy_ref", "toy_absent"),
    bound="memory",
    flops=lambda shape, mode: 2.0 * shape.rows * shape.hidden,
    bytes=lambda shape, dtype, mode: 2.0 * shape.rows * shape.hidden * (4 if dtype == "fp32" else 2),
    make_inputs=lambda shape, dtype, mode, device, seed: (),
    reference64=lambda inputs, mode: None,
    shape_type=Rows,
)
TOY_SHAPE = Rows("toy_r64_h32", 64, 32)


def _variant(name: str) -> Variant:
    return Variant(
        name,
        "test",
        "toy",
        prepare=lambda c, d, s: Prepared(fn=lambda: None, q=None, k=None, v=None),
        operator="toyrows",
    )


@pytest.fixture
def toy(monkeypatch):
    """The toy operator, three variants of it and its shape, registered for one test."""
    registry.all_variants()  # the built-ins first, as in any process
    monkeypatch.setitem(operators._OPERATORS, "toyrows", TOY)
    for name in ("toy_base", "toy_ref", "toy_fast"):
        monkeypatch.setitem(registry._REGISTRY, name, _variant(name))
    monkeypatch.setitem(shapes.SHAPES, TOY_SHAPE.id, TOY_SHAPE)
    monkeypatch.setitem(shapes.SHAPE_SETS, "mixed", ("cpu_tiny", TOY_SHAPE.id))
    return TOY


def _timing(case, median: float) -> CaseTiming:
    raw = RawMeasurement(key=case.case_id, timing_mode="cpu_wall", samples_us=[median * 0.99, median, median * 1.01])
    return case_timing(case, raw, case.group)


def test_each_variant_is_planned_on_its_operator_s_shapes_and_modes_baseline_first(toy):
    cases = plan_cases(["torch_3op", "toy_fast", "sdpa", "toy_base"], shapes.shape_set("mixed"), ["fp16"], [True])
    assert [c.case_id for c in cases] == [
        "sdpa/cpu_tiny/fp16/causal",
        "torch_3op/cpu_tiny/fp16/causal",
        "toy_base/toy_r64_h32/fp16/fwd",
        "toy_fast/toy_r64_h32/fp16/fwd",
    ]
    toy_case = cases[2]
    assert (toy_case.operator, toy_case.mode, toy_case.group) == ("toyrows", "fwd", "toy_r64_h32/fp16/fwd")
    assert toy_case.to_case() == Case("toy_base", TOY_SHAPE, "fp16", mode="fwd", operator="toyrows")
    assert (toy_case.flops, toy_case.bytes, toy_case.bound) == (2.0 * 64 * 32, 2.0 * 64 * 32 * 2, "memory")
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    assert plan.baselines == {"attention": "sdpa", "rmsnorm": "rmsnorm_torch", "toyrows": "toy_base"}
    assert plan.references["toyrows"] == ["toy_ref", "toy_absent"]


def test_case_ids_carry_any_registered_operator_s_mode(toy):
    assert case_id("toy_base", TOY_SHAPE.id, "bf16", "fwd") == "toy_base/toy_r64_h32/bf16/fwd"
    assert case_id("sdpa", "cpu_tiny", "fp16", True) == "sdpa/cpu_tiny/fp16/causal"  # the harness API's form
    assert parse_case_id("toy_base/toy_r64_h32/bf16/fwd") == ("toy_base", "toy_r64_h32", "bf16", "fwd")
    assert [c.case_id for c in planned_cases(["toy_fast/toy_r64_h32/fp16/fwd"])] == ["toy_fast/toy_r64_h32/fp16/fwd"]
    with pytest.raises(
        ValueError, match=r"^not a case id \(variant/shape/dtype/causal\|fwd\|noncausal\): 'a/b/c/bwd'$"
    ):
        parse_case_id("a/b/c/bwd")
    attention = Case("sdpa", shapes.SHAPES["cpu_tiny"], "fp16", mode="noncausal")
    assert (attention.causal, attention.id) == (False, "sdpa/cpu_tiny/fp16/noncausal")
    with pytest.raises(ValueError, match="needs its mode"):
        Case("toy_base", TOY_SHAPE, "fp16", operator="toyrows")


def test_gaps_are_taken_against_the_operator_s_own_baseline_and_references(toy):
    cases = plan_cases(["toy_fast", "toy_ref", "toy_base"], [TOY_SHAPE], ["fp16"], [True])
    timings = [_timing(c, median) for c, median in zip(cases, (10.0, 5.0, 8.0))]  # toy_base, toy_fast, toy_ref
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    apply_gaps(timings, plan.baselines, plan.references)
    base, fast, ref = timings
    assert (fast.gap_to_baseline, fast.baseline_variant) == (pytest.approx(0.5), "toy_base")
    assert (fast.fastest_reference, fast.gap_to_fastest_reference) == ("toy_ref", pytest.approx(5 / 8))
    assert (fast.operator, fast.bound, fast.bytes) == ("toyrows", "memory", 2.0 * 64 * 32 * 2)
    # The record passes the bundle's own checks, and stores no gap_to_sdpa: the baseline is not sdpa.
    record = parse_case_timing(dataclasses.asdict(fast), "timings.json", "timings[0]")
    columns = _timing_columns(record)
    assert (columns["bound"], columns["gap_to_baseline"], columns["gap_to_sdpa"]) == (
        "memory",
        pytest.approx(0.5),
        None,
    )


def test_rmsnorm_is_wired_its_cases_gaps_and_byte_model():
    """The registered RMSNorm: its shapes in the named sets, its variants planned on them only,
    gaps against rmsnorm_torch and the faster of Liger and quack."""
    assert "rms_cpu_tiny" in shapes.SHAPE_SETS["cpu"] and "rms_t4k_h2048" in shapes.SHAPE_SETS["pr"]
    assert registry.baseline("rmsnorm").name == "rmsnorm_torch"
    names = ["rmsnorm_triton", "rmsnorm_quack", "rmsnorm_liger", "rmsnorm_torch", "sdpa"]
    cases = plan_cases(names, shapes.shape_set("pr"), ["bf16"], [True])
    rms = [c for c in cases if c.operator == "rmsnorm"]
    assert [c.case_id for c in rms[:4]] == [
        "rmsnorm_torch/rms_t4k_h2048/bf16/fwd",
        "rmsnorm_triton/rms_t4k_h2048/bf16/fwd",
        "rmsnorm_quack/rms_t4k_h2048/bf16/fwd",
        "rmsnorm_liger/rms_t4k_h2048/bf16/fwd",
    ]
    assert len(rms) == 8 and all(c.variant == "sdpa" for c in cases if c.operator == "attention")
    group = rms[:4]
    timings = [_timing(c, median) for c, median in zip(group, (20.0, 10.0, 8.0, 12.0))]
    plan = RunPlan(cases=cases, timing=timing_config("cpu").to_dict(), device_kind="cpu")
    apply_gaps(timings, plan.baselines, plan.references)
    own = timings[1]
    assert (own.gap_to_baseline, own.baseline_variant) == (pytest.approx(0.5), "rmsnorm_torch")
    assert (own.fastest_reference, own.gap_to_fastest_reference) == ("rmsnorm_quack", pytest.approx(10 / 8))
    assert (own.bound, own.bytes) == ("memory", float((2 * 4096 * 2048 + 2048) * 2))


def test_a_v2_timing_is_attention_against_sdpa():
    old = {"schema_version": 2, "gap_to_sdpa": 1.25, "gap_to_fastest_backend": 0.9, "fastest_backend": "sdpa_flash"}
    assert case_timing_v2_to_v3(dict(old)) == {
        "schema_version": 3,
        "operator": "attention",
        "bound": "compute",
        "bytes": None,
        "gap_to_baseline": 1.25,
        "baseline_variant": "sdpa",
        "gap_to_fastest_reference": 0.9,
        "fastest_reference": "sdpa_flash",
    }
    assert case_timing_v2_to_v3({"schema_version": 2, "gap_to_sdpa": None})["baseline_variant"] is None


def test_migration_012_backfills_from_the_old_columns_and_keeps_gap_to_sdpa(tmp_path):
    db = history_at_version(tmp_path / "h.duckdb", 11, tmp_path)
    con = duckdb.connect(str(db))
    con.execute(
        "INSERT INTO results (run_id, case_id, variant, batch, heads, seq_q, seq_k, head_dim, dtype, status, "
        "timing_mode, median_us, gap_to_sdpa, gap_to_fastest_backend, fastest_backend) VALUES "
        "('r', 'triton_fa2/s/fp16/causal', 'triton_fa2', 2, 4, 128, 128, 64, 'fp16', 'ok', 'cuda_events', "
        "10.0, 1.5, 0.75, 'sdpa_flash'), "
        "('r', 'cuda_wmma/s/fp16/causal', 'cuda_wmma', 2, 4, 128, 128, 64, 'fp16', 'crashed', NULL, NULL, "
        "NULL, NULL, NULL)"
    )
    con.execute(
        "INSERT INTO alerts (dedup_key, kind, metric, case_id) VALUES "
        "('step|a|gpu|gap_to_sdpa|c|p', 'regression', 'gap_to_sdpa', 'triton_fa2/s/fp16/causal')"
    )
    con.close()
    assert upgrade(parse_location(db))[0] == 12  # and any later migration
    with open_read(parse_location(db)) as con:
        rows = con.execute(
            "SELECT operator, bound, bytes, gap_to_baseline, baseline_variant, gap_to_fastest_reference, "
            "fastest_reference, gap_to_sdpa FROM results ORDER BY variant DESC"
        ).fetchall()
        alert = con.execute("SELECT metric, dedup_key FROM alerts").fetchone()
        view_columns = {d[0] for d in con.execute("SELECT * FROM result_details LIMIT 0").description}
    assert rows == [
        ("attention", "compute", 4.0 * 2 * 4 * 128 * 64 * 2, 1.5, "sdpa", 0.75, "sdpa_flash", 1.5),
        ("attention", None, None, None, None, None, None, None),
    ]
    assert alert == ("gap_to_baseline", "step|a|gpu|gap_to_sdpa|c|p")
    assert {"gap_to_sdpa", "gap_to_baseline", "operator", "bytes"} <= view_columns
