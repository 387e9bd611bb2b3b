"""The ncu profile cache (ci/ncu/profile_cache.py), end to end against the stand-in `ncu` (no GPU
here): real ncu processes of the stand-in, real cache files under a private folder, real bundles.

A case profiled once is read back, not profiled again, while everything its key names is the
same; anything else (the variant's fingerprint, the GPU, ncu's version, the sections) is a miss;
an entry that is damaged or not what it claims is ignored and profiled again; a variant whose
fingerprint is unknown is never cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import stand_in_ncu  # tests/ helper
from bundle_factory import SHAPES as FACTORY_SHAPES
from bundle_factory import make_bundle

from attnwatch.ci.compare.measure import Measured
from attnwatch.ci.compare.rounds import CaseRound, RoundData
from attnwatch.ci.compare.session import Session, add_ncu
from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections
from attnwatch.ci.ncu.profile_cache import KIND, profile_through_cache
from attnwatch.ci.plan import plan_cases
from attnwatch.history.contract.bundle import NCU_FILE, NCU_RAW_FILE
from attnwatch.history.contract.ncu_csv import check_bundle_csv
from attnwatch.kernels.cases import Case
from attnwatch.kernels.compile_cache import CacheEntryWarning
from attnwatch.kernels.shapes import SHAPES

GPU = "NVIDIA H200"
SHAPE = SHAPES["b4_h16_s1k"]
SDPA, UNFUSED = "sdpa/b4_h16_s1k/fp16/noncausal", "torch_3op/b4_h16_s1k/fp16/noncausal"


def _fingerprints(sdpa: str = "a", unfused: str = "b") -> dict[str, dict]:
    return {
        "sdpa": {"digest": sdpa * 64, "code": "c" * 64, "unknown": None},
        "torch_3op": {"digest": unfused * 64, "code": "d" * 64, "unknown": None},
    }


@pytest.fixture
def ncu(tmp_path, monkeypatch, fixtures_dir) -> Path:
    """The stand-in on ATTNWATCH_NCU, logging every invocation; the cache root in tmp_path."""
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ATTNWATCH_TRUST", raising=False)
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu.log"))
    stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)
    return tmp_path / "ncu.log"


def _calls(log: Path) -> list[list[str]]:
    """Every ncu invocation since the last call, and forget them."""
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def _profiled(calls: list[list[str]]) -> list[str]:
    """The case ids the profiling processes among `calls` were asked for."""
    plans = [json.loads(Path(call[-1]).read_text()) for call in calls if "--export" in call]
    return [f"{c['variant']}/{c['shape']['id']}/{c['dtype']}/noncausal" for plan in plans for c in plan["cases"]]


def _cases(*variants: str) -> list[Case]:
    return [Case(variant, SHAPE, "fp16", False) for variant in variants or ("sdpa", "torch_3op")]


def _profile(tmp_path: Path, run: str, cases=None, **options):
    options = {"fingerprints": _fingerprints(), "sections": choose_sections(EXPLAIN), "gpu_name": GPU, **options}
    return profile_through_cache(cases or _cases(), tmp_path / run, **options)


def _entries(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """case id -> its entry's (table, metadata) files."""
    folder = tmp_path / "cache" / KIND / "local"
    found = {}
    for meta in folder.glob("*.json"):
        found[json.loads(meta.read_text())["key"]["case_id"]] = (meta.with_suffix(".csv"), meta)
    return found


def test_a_second_profile_of_the_same_work_runs_no_profiler_and_gives_the_same_records(tmp_path, ncu):
    first, use = _profile(tmp_path, "one")
    assert sorted(_profiled(_calls(ncu))) == [SDPA, UNFUSED] and use.cached == [] and use.off is None
    assert use.stored == [SDPA, UNFUSED] and not first.errors
    again, use = _profile(tmp_path, "two")
    calls = _calls(ncu)
    assert not any("--export" in call or "--import" in call for call in calls), calls  # only `ncu --version`
    assert use.cached == [SDPA, UNFUSED] and use.stored == [] and not use.ignored
    assert again.files().kernels == first.files().kernels and again.files().cases == first.files().cases
    assert again.ncu_version == first.ncu_version and again.errors == {}
    assert again.phases == {} and again.passes == []  # what this profile's ncu did: nothing
    assert _rows(again.raw_csv) == _rows(first.raw_csv)  # ncu's own lines, one whole table per cached case
    assert len(check_bundle_csv("cached", again.raw_csv)) == 2
    assert "2 of 2 from the cache" in use.summary(2)


def _rows(text: str) -> list[tuple[list[str], list[str]]]:
    return sorted((table.header, row) for table in check_bundle_csv("csv", text) for row in table.rows)


def test_a_later_profile_of_other_cases_reuses_the_ones_it_shares(tmp_path, ncu):
    _profile(tmp_path, "one", _cases("sdpa"))
    _calls(ncu)
    both, use = _profile(tmp_path, "two")
    assert _profiled(_calls(ncu)) == [UNFUSED] and use.cached == [SDPA] and use.stored == [UNFUSED]
    assert [m.case_id for m in both.case_metrics] == [SDPA, UNFUSED]  # the cases' order, whatever the source
    assert [r.case_id for r in both.kernel_rows] == [SDPA] + [UNFUSED] * 3
    assert len(check_bundle_csv("merged", both.raw_csv)) == 2  # the fresh pass's table, then the cached case's


CHANGES = {
    "variant fingerprint": ({"fingerprints": _fingerprints(sdpa="e", unfused="f")}, {}),
    "GPU model": ({"gpu_name": "NVIDIA H100 80GB HBM3"}, {}),
    "ncu version": ({}, {"FAKE_NCU_VERSION": "Version 2025.4.0.0 (build 1)"}),
    "sections": ({"sections": choose_sections("core")}, {}),
    "cache control": ({"cache_control": "none"}, {}),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_anything_the_key_names_changed_is_a_miss(tmp_path, ncu, monkeypatch, change):
    _profile(tmp_path, "one")
    _calls(ncu)
    options, env = CHANGES[change]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _, use = _profile(tmp_path, "two", **options)
    assert sorted(_profiled(_calls(ncu))) == [SDPA, UNFUSED] and use.cached == [] and not use.ignored
    assert use.stored == [SDPA, UNFUSED]  # under its own key, beside the first
    assert len(_entries_files(tmp_path)) == 8


def _entries_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / KIND / "local").iterdir())


def _edit_table(table: Path, meta: Path) -> None:
    table.write_text(table.read_text().replace("b4_h16_s1k", "b4_h16_s1X"))


def _truncate_metadata(table: Path, meta: Path) -> None:
    meta.write_text(meta.read_text()[:40])


def _other_schema(table: Path, meta: Path) -> None:
    record = json.loads(meta.read_text())
    record["key"]["schema"] = "attnwatch.ncu-case-profile/0"
    meta.write_text(json.dumps(record))


def _other_case_with_its_digest(table: Path, meta: Path) -> None:
    """Another case's rows in its table, the digest rewritten to match: a verified file that lies."""
    text = table.read_text().replace("sdpa/b4_h16_s1k", "sdpa/b4_h16_s2k")
    table.write_text(text)
    record = json.loads(meta.read_text())
    record["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    meta.write_text(json.dumps(record))


def _writable_by_others(table: Path, meta: Path) -> None:
    table.chmod(0o666)


PLANTS = {
    "edited bytes": _edit_table,
    "truncated metadata": _truncate_metadata,
    "another schema": _other_schema,
    "another case's rows under a matching digest": _other_case_with_its_digest,
    "writable by others": _writable_by_others,
}


@pytest.mark.parametrize("plant", PLANTS, ids=list(PLANTS))
def test_a_damaged_or_foreign_entry_is_ignored_profiled_again_and_replaced(tmp_path, ncu, plant):
    first, _ = _profile(tmp_path, "one")
    _calls(ncu)
    PLANTS[plant](*_entries(tmp_path)[SDPA])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheEntryWarning)  # the ones that can say why warn; all are logged
        again, use = _profile(tmp_path, "two")
    assert _profiled(_calls(ncu)) == [SDPA] and use.cached == [UNFUSED] and list(use.ignored) == [SDPA]
    assert use.stored == [SDPA] and "1 cache entry ignored" in use.summary(2)
    assert again.files().cases == first.files().cases and again.files().kernels == first.files().kernels
    _, use = _profile(tmp_path, "three")  # the replaced entry is a hit
    assert _profiled(_calls(ncu)) == [] and use.cached == [SDPA, UNFUSED]


def test_an_entry_whose_checks_can_say_why_is_warned(tmp_path, ncu):
    _profile(tmp_path, "one")
    _edit_table(*_entries(tmp_path)[SDPA])
    with pytest.warns(CacheEntryWarning, match="sha256"):
        _profile(tmp_path, "two")


@pytest.mark.parametrize(
    "printed",
    [
        {"digest": None, "unknown": "a compiled binary is not in this process's compile cache"},
        {"digest": "a" * 64, "unknown": "the closure has an unresolved import"},  # no digest is trusted beside it
        None,  # the side did not fingerprint the variant at all
    ],
    ids=["unknown", "digest beside unknown", "missing"],
)
def test_a_variant_whose_fingerprint_is_unknown_is_never_cached(tmp_path, ncu, printed):
    fingerprints = _fingerprints()
    if printed is None:
        del fingerprints["sdpa"]
    else:
        fingerprints["sdpa"] = printed
    for run in ("one", "two"):
        _, use = _profile(tmp_path, run, fingerprints=fingerprints)
        assert SDPA in _profiled(_calls(ncu)) and SDPA not in use.cached + use.stored
    assert list(_entries(tmp_path)) == [UNFUSED]


def test_nothing_is_cached_without_a_gpu_model_or_a_known_fingerprint(tmp_path, ncu):
    _, use = _profile(tmp_path, "one", gpu_name=None)
    assert use.off == "no GPU model named" and not use.stored
    _, use = _profile(tmp_path, "two", fingerprints={})
    assert use.off == "no profiled variant has a known fingerprint" and "not cached" in use.summary(2)
    assert not (tmp_path / "cache" / KIND).exists()


def test_a_case_ncu_could_not_profile_is_not_stored(tmp_path, ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "case_fails")  # the target fails every torch_3op case
    profile, use = _profile(tmp_path, "one")
    assert UNFUSED in profile.errors and use.stored == [SDPA]
    assert list(_entries(tmp_path)) == [SDPA]


def test_a_profile_that_left_counters_out_is_not_stored(tmp_path, ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "no_sass_metric")  # ncu refuses the per-opcode counts: profiled without
    profile, use = _profile(tmp_path, "one")
    assert profile.notes and not profile.errors and use.stored == []


# ------------------------------------------------------------------ through the compare's add_ncu


@dataclass
class _Side:
    """What add_ncu reads of a side's workers (ci.compare.side_group.SideGroup)."""

    environment: dict
    fingerprints: dict


def _session(tmp_path: Path, run: str) -> Session:
    rounds, bundles = {}, {}
    for name in ("base", "head"):
        bundle = make_bundle(
            tmp_path / run / f"{name}-round1",
            run_id=f"{run}-{name}",
            variants=("sdpa", "torch_3op"),
            shapes=(FACTORY_SHAPES[2],),  # b4_h16_s1k
            causal=(False,),
            n_samples=5,
        )
        cases = {
            cid: CaseRound(cid, cid.split("/")[0], "b4_h16_s1k", "fp16", False, "ok", [1.0]) for cid in (SDPA, UNFUSED)
        }
        rounds[name] = [RoundData(str(bundle), GPU, "0" * 40, cases)]
        bundles[name] = [bundle]
    sides = {
        "base": _Side({"gpu_name": GPU}, _fingerprints()),
        "head": _Side({"gpu_name": GPU}, _fingerprints(unfused="9")),  # the pull request changed torch_3op
    }
    return Session(Measured(rounds["base"], rounds["head"]), sides, [], bundles)


def test_add_ncu_reads_what_an_earlier_compare_profiled_and_writes_the_same_bundle(tmp_path, ncu):
    cases = plan_cases(["sdpa", "torch_3op"], [SHAPE], ["fp16"], [False])
    roots = {"base": None, "head": None}
    logged: list[str] = []
    first = _session(tmp_path, "one")
    add_ncu(first, cases, roots, tmp_path / "one", logged.append)
    assert sorted(_profiled(_calls(ncu))) == [SDPA, UNFUSED, UNFUSED]  # the head's sdpa is the base's work
    assert "0 of 2 from the cache" in logged[0] and "1 of 2 from the cache" in logged[1], logged
    logged.clear()
    second = _session(tmp_path, "two")
    add_ncu(second, cases, roots, tmp_path / "two", logged.append)
    assert _profiled(_calls(ncu)) == [] and not (tmp_path / "two" / "ncu").exists()
    assert all("2 of 2 from the cache" in line for line in logged), logged
    for name in ("base", "head"):
        before, after = first.bundles[name][0], second.bundles[name][0]
        assert (before / NCU_FILE).read_text() == (after / NCU_FILE).read_text()
        assert _rows((before / NCU_RAW_FILE).read_text()) == _rows((after / NCU_RAW_FILE).read_text())
    assert os.listdir(tmp_path / "cache" / KIND / "local")  # one private folder per trust level


def test_add_ncu_profiles_in_the_order_it_is_given_so_a_deadline_cuts_the_extras_last(tmp_path, ncu):
    cases = plan_cases(["sdpa", "torch_3op"], [SHAPE], ["fp16"], [False])
    add_ncu(
        _session(tmp_path, "one"),
        cases,
        {"base": None, "head": None},
        tmp_path / "one",
        lambda line: None,
        only=[UNFUSED, SDPA],
    )
    assert _profiled(_calls(ncu)) == [UNFUSED, SDPA, UNFUSED]  # the head's sdpa comes from the base's profile
