"""Series keyed by GPU model x pool (history.contract.series_key): two hosts of one model are two series
unless their runners declared one pool; the GPUs of one host share one. Real bundles, a real
DuckDB history, `attnwatch detect` as CI runs it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bundle_factory import make_bundle
from attnwatch.cli.main import main
from attnwatch.history.detection.alerts import list_alerts
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
VARIANTS = ("sdpa", "triton_fa2", "cuda_wmma")
TRITON_CASES = 4  # triton_fa2 x 2 shapes x fp16 x causal/non-causal


def _run(tmp_path, i, host, *, scale=1.0, step_from=99, pool=None, gpu_index=None, broken=False, minutes=0):
    """Main run `i` (commit i) on `host`; `scale` is the host's constant offset, triton_fa2 6% slower
    from `step_from`; `gpu_index` and `pool` set the GPU's identity and a declared pool."""
    environment = {}
    if gpu_index is not None:
        environment = {
            "gpu_index": gpu_index,
            "gpu_uuid": f"GPU-{host}-{gpu_index}",
            "gpu_pci_bus_id": f"00000000:{0x19 + gpu_index:02X}:00.0",
        }
    if pool:
        environment["pool"] = pool
    run_id = f"{host}-{gpu_index}-{i}"
    return make_bundle(
        tmp_path / run_id,
        run_id=run_id,
        commit_sha=f"{i:040x}",
        seed=1000 * (gpu_index or 0) + 100 * sum(map(ord, host)) + i,
        started_at=T0 + timedelta(hours=i, minutes=minutes),
        commit_date=T0 + timedelta(hours=i),
        hostname=host,
        variants=VARIANTS,
        latency_scale=scale,
        variant_scale={"triton_fa2": 1.06} if i >= step_from else None,
        statuses={"cuda_wmma/l4_mission/fp16/causal": "failed"} if broken else None,
        environment=environment,
    )


def _detect(db_path, paths, capsys):
    ingest_paths(parse_location(db_path), paths)
    assert main(["--db", str(db_path), "detect"]) == 0
    capsys.readouterr()
    return list_alerts(parse_location(db_path), {"limit": 1000})


def test_a_second_host_with_an_offset_is_not_a_regression(tmp_path, db_path, capsys):
    # Jobs move from host a to host b, whose H200 runs 5% slower at every commit: no kernel changed.
    paths = [_run(tmp_path, i, "h200-a") for i in range(10)] + [
        _run(tmp_path, i, "h200-b", scale=1.05) for i in range(10, 20)
    ]
    assert _detect(db_path, paths, capsys) == []


def test_the_same_offset_is_a_step_when_both_hosts_are_declared_one_pool(tmp_path, db_path, capsys):
    # Control for the test above: the same data, the runners saying their GPUs are interchangeable.
    paths = [_run(tmp_path, i, "h200-a", pool="h200-fleet") for i in range(10)] + [
        _run(tmp_path, i, "h200-b", scale=1.05, pool="h200-fleet") for i in range(10, 20)
    ]
    alerts = _detect(db_path, paths, capsys)
    assert {a.kind for a in alerts} == {"regression"} and {a.commit_sha for a in alerts} == {f"{10:040x}"}
    assert {a.pool for a in alerts} == {"h200-fleet"}


def test_a_real_step_on_two_hosts_is_found_on_each(tmp_path, db_path, capsys):
    # Every commit measured on both hosts (b 4% slower); triton_fa2 6% slower from commit 10 on both.
    paths = [
        _run(tmp_path, i, host, scale=scale, step_from=10, minutes=m)
        for i in range(20)
        for host, scale, m in (("h200-a", 1.0, 0), ("h200-b", 1.04, 30))
    ]
    steps = [a for a in _detect(db_path, paths, capsys) if a.kind == "regression"]
    assert len(steps) == 2 * TRITON_CASES * 2  # per host, per case, per metric
    assert {a.pool for a in steps} == {"h200-a", "h200-b"}
    assert {a.commit_sha for a in steps} == {f"{10:040x}"}
    assert all(4.0 < a.change_pct < 8.0 for a in steps)  # each against its own host's level, not the offset


def test_the_gpus_of_one_host_share_one_series(tmp_path, db_path, capsys):
    # A 2-GPU host, one runner per GPU: pushes land on either GPU. One series, one alert per step.
    paths = [_run(tmp_path, i, "h200-a", gpu_index=i % 2, step_from=10) for i in range(20)]
    steps = [a for a in _detect(db_path, paths, capsys) if a.kind == "regression"]
    assert len(steps) == TRITON_CASES * 2 and {a.commit_sha for a in steps} == {f"{10:040x}"}
    assert {a.pool for a in steps} == {"h200-a"}


def test_a_correctness_failure_on_one_host_is_one_streak(tmp_path, db_path, capsys):
    # Host a fails a case from commit 4 on; host b, measuring the same commits, passes it.
    paths = [
        _run(tmp_path, i, host, broken=host == "h200-a" and i >= 4, minutes=m)
        for i in range(10)
        for host, m in (("h200-a", 0), ("h200-b", 30))
    ]
    broken = [a for a in _detect(db_path, paths, capsys) if a.kind == "correctness"]
    assert [a.commit_sha for a in broken] == [f"{4:040x}"]  # mixed with b's passes: a new "streak" per commit
    assert broken[0].pool == "h200-a"
