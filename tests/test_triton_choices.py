"""The recorded configuration table (kernels/triton/choices.toml) and how runs use it.

A run reads its Triton configuration from the table for its GPU model and problem, so fresh
processes agree; only a problem the table lacks is tuned in the process, and says so.
"""

from __future__ import annotations

import json
from dataclasses import asdict
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnwatch.kernels.shapes import Shape, shape_set
from attnwatch.kernels.triton import choice_cache, tuner
from attnwatch.kernels.triton.choices import (
    CHOICES_FILE,
    HEADER,
    Recorded,
    Tuning,
    load_choices,
    merged,
    parse_choices,
    problem_id,
    render_choices,
)
from attnwatch.kernels.triton.configs import ConfigError, load_table, runs_exactly

REPO_ROOT = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200"
TUNING = {
    "gpu": H200,
    "date": "2026-11-26",
    "commit": "abc1234",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "job": "python3 -m scripts.tune_triton --write-choices",
    "tie_margin": 0.02,
    "rounds": 200,
}
CHOICE = {
    "gpu": H200,
    "problem": "b4_h16_s2048_d64",
    "dtype": "fp16",
    "causal": False,
    "config": "m128_n64_w8_s3",
    "trials_us": {"m64_n64_w4_s3": 164.7, "m128_n64_w8_s3": 160.5},
}


@pytest.fixture(autouse=True)
def _fresh_tuner(tmp_path, monkeypatch):
    monkeypatch.setenv(choice_cache.DIR_ENV, str(tmp_path / "triton-choices"))  # never the user's cache
    monkeypatch.delenv(choice_cache.RETUNE_ENV, raising=False)
    tuner.forget_choices()
    yield
    tuner.forget_choices()


def _meta(b, h, s, d, dtype=torch.float16):
    return torch.empty(b, h, s, d, dtype=dtype, device="meta")


def test_the_committed_table_covers_the_main_shapes_on_the_h200_and_each_entry_runs_its_problem():
    table, configs = load_choices(), load_table()
    assert H200 in table.tunings and table.tunings[H200].commit
    for shape in shape_set("main", Shape):
        for causal in (False, True):
            entry = table.lookup(
                H200, problem_id(shape.batch, shape.heads, shape.seq_len, shape.head_dim), "fp16", causal
            )
            assert entry is not None, (shape.id, causal)
            assert runs_exactly(configs.configs[entry.config], causal, shape.seq_len)
            assert entry.config in entry.trials_us  # chosen from what the job measured


def test_a_recorded_problem_uses_the_table_without_timing_anything(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(tuner, "time_candidates", lambda *a, **k: pytest.fail("a recorded problem was timed"))
    q = _meta(4, 16, 2048, 64)
    choice = tuner.choose(q, q, q, q, causal=False, gpu=H200)
    expected = load_choices().lookup(H200, "b4_h16_s2048_d64", "fp16", False).config
    assert (choice.config.name, choice.source, choice.tuned) == (expected, "table", False)
    assert choice.as_record()["source"] == "table"


def test_a_problem_the_table_lacks_is_tuned_in_the_process_and_says_so(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    timed = []

    def fake_timing(q, k, v, out, causal, found, margin):
        timed.append([c.name for c in found])
        return tuner.Choice(found[-1], tuned=True, trials=[], source="tuned")

    monkeypatch.setattr(tuner, "time_candidates", fake_timing)
    q = _meta(3, 16, 2048, 64)  # B=3: no entry
    choice = tuner.choose(q, q, q, q, causal=False, gpu=H200)
    assert choice.source == "tuned" and timed
    q = _meta(4, 16, 2048, 64)  # recorded, but for another GPU model only
    assert tuner.choose(q, q, q, q, causal=False, gpu="NVIDIA H100 80GB HBM3").source == "tuned"
    q = _meta(4, 16, 2048, 64, torch.bfloat16)  # recorded for fp16 only
    assert tuner.choose(q, q, q, q, causal=False, gpu=H200).source == "tuned"


_FRESH = """
import json, torch
from attnwatch.kernels.shapes import Shape, shape_set
from attnwatch.kernels.triton import tuner
out = {}
for s in shape_set("main", Shape):
    for causal in (False, True):
        q = torch.empty(s.batch, s.heads, s.seq_len, s.head_dim, dtype=torch.float16, device="meta")
        c = tuner.choose(q, q, q, q, causal, gpu="NVIDIA H200")
        out[f"{s.id}/{causal}"] = [c.config.name, c.source]
print(json.dumps(out))
"""


def test_three_fresh_processes_choose_the_same_configurations():
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FRESH],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0] == results[1] == results[2]
    assert {source for _, source in results[0].values()} == {"table"}


def _doc(**changes):
    choice = {**CHOICE, **changes.pop("choice", {})}
    return {"tuning": [{**TUNING, **changes.pop("tuning", {})}], "choice": [choice], **changes}


@pytest.mark.parametrize(
    "document, field",
    [
        (_doc(choice={"config": "m999"}), "'config'"),
        (_doc(choice={"dtype": "fp8"}), "'dtype'"),
        (_doc(choice={"causal": "no"}), "'causal'"),
        (_doc(choice={"gpu": "NVIDIA B200"}), "[[tuning]]"),
        (_doc(choice={"trials_us": {"m64_n64_w4_s3": -1}}), "'trials_us'"),
        (_doc(tuning={"rounds": True}), "'rounds'"),
        ({"tuning": [TUNING], "choice": [CHOICE, CHOICE]}, "twice"),
    ],
)
def test_a_malformed_entry_names_the_file_and_the_field(document, field):
    with pytest.raises(ConfigError, match=r"choices\.toml: \[\[(choice|tuning)\]\] #\d") as info:
        parse_choices(document, "choices.toml", load_table())
    assert field in str(info.value)


def test_rendered_table_reads_back_the_same_in_a_stable_order(tmp_path):
    base = parse_choices(_doc(), "choices.toml", load_table())
    other = Recorded(H200, "b1_h8_s512_d64", "fp16", True, "m64_n64_w4_s5", {"m64_n64_w4_s5": 10.66})
    table = merged(base, Tuning(**{**TUNING, "commit": "def5678"}), [other])
    text = render_choices(table, HEADER)
    assert parse_choices(tomllib.loads(text), "x", load_table()) == table
    assert render_choices(merged(base, table.tunings[H200], [other]), HEADER) == text  # order-independent
    assert table.tunings[H200].commit == "def5678"


def test_the_tuning_job_applies_the_tuners_rule_to_its_medians(tmp_path):
    from attnwatch.scripts.tune_choices import write_choices

    def case(shape_id, b, h, s, d, causal, medians):
        return {
            "case": f"triton_fa2/{shape_id}/fp16/{'causal' if causal else 'noncausal'}",
            "shape": {"id": shape_id, "batch": b, "heads": h, "seq_len": s, "head_dim": d},
            "candidates": {n: {"median_us": us} for n, us in medians.items()},
        }

    result = {
        "gpu": "NVIDIA Test GPU",
        "torch": "2.11.0",
        "triton": "3.6.0",
        "cases": [
            # bucket order m64_n64_w4_s3, m128_n64_w8_s3, m128_n64_w8_s4: 1.5% faster is within the tie margin
            case(
                "b4_h16_s2k",
                4,
                16,
                2048,
                64,
                False,
                {"m64_n64_w4_s3": 100.0, "m128_n64_w8_s3": 98.5, "m128_n64_w8_s4": 99.0},
            ),
            case(
                "b16_h16_s2k", 16, 16, 2048, 64, False, {"m64_n64_w4_s3": 100.0, "m128_n64_w8_s3": 90.0}
            ),  # 10% faster wins
            case("s777_odd", 2, 4, 777, 64, False, {"m64_n64_w4_s3": 10.0}),  # not a named shape: not recorded
        ],
    }
    path = tmp_path / "choices.toml"
    write_choices(path, result, rounds=200, commit="abc1234", job="python3 -m scripts.tune_triton --write-choices")
    table = parse_choices(tomllib.loads(path.read_text()), path.name, load_table())
    gpu = "NVIDIA Test GPU"
    assert table.lookup(gpu, "b4_h16_s2048_d64", "fp16", False).config == "m64_n64_w4_s3"
    assert table.lookup(gpu, "b16_h16_s2048_d64", "fp16", False).config == "m128_n64_w8_s3"
    assert len(table.entries) == 2 and table.tunings[gpu].commit == "abc1234"


def test_the_recorded_job_line_names_no_machine_folder():
    from attnwatch.scripts.tune_triton import recorded_args

    assert (
        recorded_args(["--shapes", "main", "--out", "/somewhere/out", "--out=/x", "--write-choices"])
        == "--shapes main --write-choices"
    )
    assert "/" not in load_choices(CHOICES_FILE).tunings[H200].job.split("tune_triton", 1)[1]


def test_a_prepare_that_reports_a_configuration_and_binary_reaches_the_stored_timing():
    """CaseSetup keeps what Prepared said; case_timing stores it (worker and compare server
    alike). An older checkout's Prepared, which has no binary_sha256, stores None."""
    from attnwatch.ci.plan import PlannedCase
    from attnwatch.ci.suites.case_setup import CaseSetup
    from attnwatch.ci.timing.derived import KernelRan, case_timing
    from attnwatch.ci.timing.sampler import RawMeasurement
    from attnwatch.history.contract.timings import parse_case_timing
    from attnwatch.kernels.shapes import adhoc_shape
    from attnwatch.kernels.variant import Prepared

    digest = "ab" * 32
    planned = SimpleNamespace(
        case_id="triton_fa2/x/fp16/noncausal",
        dtype="fp16",
        shape=lambda: adhoc_shape(1, 1, 16, 16),
        bytes=4.0 * 16 * 16 * 2,
    )
    case = PlannedCase(
        variant="triton_fa2", shape_id="x", batch=1, heads=1, seq_len=16, head_dim=16, dtype="fp16", causal=False
    )
    raw = RawMeasurement(key=case.case_id, samples_us=[10.0, 11.0, 12.0], timing_mode="cuda_events", converged=True)
    new = Prepared(fn=lambda: None, config="m64_n128_w4_s3", config_source="tuned", binary_sha256=digest)
    older = SimpleNamespace(fn=lambda: None, config="m64_n128_w4_s3", config_source="tuned")
    for prepared, binary in ((new, digest), (older, None)):
        setup = CaseSetup(None, "cpu", SimpleNamespace(input_sets=1, input_sets_max_bytes=0))
        setup.prepare_rotation(SimpleNamespace(prepare=lambda case, device, seed: prepared), None, planned, 0)
        assert setup.kernels_ran[planned.case_id] == KernelRan("m64_n128_w4_s3", "tuned", binary)
        timing = case_timing(case, raw, "g", setup.kernels_ran[planned.case_id])
        assert (timing.kernel_config, timing.kernel_config_source) == ("m64_n128_w4_s3", "tuned")
        written = json.loads(json.dumps(asdict(timing)))
        assert parse_case_timing(written, "timings.json", "timings[0]").kernel_binary_sha256 == binary


def test_a_binary_digest_that_is_not_a_sha256_is_refused_naming_the_field():
    from attnwatch.ci.plan import PlannedCase
    from attnwatch.ci.timing.derived import KernelRan, case_timing
    from attnwatch.ci.timing.sampler import RawMeasurement
    from attnwatch.history.contract.timings import parse_case_timing
    from attnwatch.history.errors import BundleError

    case = PlannedCase(
        variant="triton_fa2", shape_id="x", batch=1, heads=1, seq_len=16, head_dim=16, dtype="fp16", causal=False
    )
    raw = RawMeasurement(key=case.case_id, samples_us=[10.0], timing_mode="cuda_events", converged=True)
    written = asdict(case_timing(case, raw, "g", KernelRan(binary_sha256="AB" * 32)))
    with pytest.raises(BundleError) as caught:
        parse_case_timing(written, "timings.json", "timings[0]")
    assert "timings[0].kernel_binary_sha256" in str(caught.value) and "sha256" in str(caught.value)


def test_the_run_summary_names_cases_tuned_in_the_process():
    from attnwatch.ci.plan import plan_cases
    from attnwatch.ci.suite_state import SuiteState
    from attnwatch.ci.summary import format_summary
    from attnwatch.kernels.shapes import SHAPES

    state = SuiteState(plan_cases(["sdpa", "triton_fa2"], [SHAPES["h100_small"]], ["fp16"], [False]))
    for cid, config, source in (
        ("sdpa/h100_small/fp16/noncausal", None, None),
        ("triton_fa2/h100_small/fp16/noncausal", "m64_n64_w4_s3", "tuned"),
    ):
        timing = {
            "case_id": cid,
            "median_us": 17.0,
            "tflops": 1.0,
            "gap_to_baseline": 1.0,
            "converged": True,
            "rel_spread": 0.01,
            "throttled_samples": 0,
            "throttle_reasons": [],
            "kernel_config": config,
            "kernel_config_source": source,
        }
        state.apply({"kind": "result", "case": cid, "status": "ok", "timing": timing, "samples_us": [17.0]})
        state.apply({"kind": "outcome", "case": cid, "status": "ok"})
    text = format_summary(state, "cuda_events")
    assert "NOTE: 1 cases ran a launch configuration tuned in this process" in text
    assert "triton_fa2/h100_small/fp16/noncausal" in text.splitlines()[-1]
    state.timings["triton_fa2/h100_small/fp16/noncausal"]["kernel_config_source"] = "table"
    assert "tuned in this process" not in format_summary(state, "cuda_events")


def _timing_picks(picks: list[str], timed: list):
    """A stand-in for the GPU timing of the candidates: the next name of `picks` wins."""

    def fake_timing(q, k, v, out, causal, found, margin):
        name = picks[len(timed) % len(picks)]
        timed.append(name)
        return tuner.Choice(
            next(c for c in found if c.name == name), tuned=True, trials=[tuner.Trial(name, 100.0)], source="tuned"
        )

    return fake_timing


def _fa_paper_query():
    return _meta(16, 32, 1024, 64)  # fa_s1024_d64: no table entry, the case that flipped 8.2% on the H200


def test_a_tuned_pick_is_reused_by_every_later_process_and_says_cached(monkeypatch):
    """The nightly grid's problems are not in the table: the first process tunes and stores, a
    later process (its in-process cache forgotten) reads the pick back without timing; a later
    timing that would pick the other near-tie does not get the chance (the 8.2% flip)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    timed: list = []
    monkeypatch.setattr(tuner, "time_candidates", _timing_picks(["m64_n64_w4_s3", "m128_n64_w8_s3"], timed))
    q = _fa_paper_query()
    first = tuner.choose(q, q, q, q, causal=False, gpu=H200)
    assert (first.config.name, first.source) == ("m64_n64_w4_s3", "tuned")
    for _ in range(2):
        tuner.forget_choices()  # a fresh process
        again = tuner.choose(q, q, q, q, causal=False, gpu=H200)
        assert (again.config.name, again.source) == ("m64_n64_w4_s3", "cached")
    assert timed == ["m64_n64_w4_s3"]
    q = _meta(16, 32, 1024, 64, torch.bfloat16)  # another key: tuned on its own
    assert tuner.choose(q, q, q, q, causal=False, gpu=H200).source == "tuned"
    assert tuner.choose(_fa_paper_query(), q, q, q, causal=False, gpu="NVIDIA H100 80GB HBM3").source == "tuned"


def test_retuning_is_explicit_replaces_the_entry_and_says_tuned(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    timed: list = []
    monkeypatch.setattr(tuner, "time_candidates", _timing_picks(["m64_n64_w4_s3", "m128_n64_w8_s3"], timed))
    q = _fa_paper_query()
    tuner.choose(q, q, q, q, causal=False, gpu=H200)
    tuner.forget_choices()
    monkeypatch.setenv(choice_cache.RETUNE_ENV, "1")
    retuned = tuner.choose(q, q, q, q, causal=False, gpu=H200)
    assert (retuned.config.name, retuned.source) == ("m128_n64_w8_s3", "tuned")
    monkeypatch.delenv(choice_cache.RETUNE_ENV)
    tuner.forget_choices()
    assert tuner.choose(q, q, q, q, causal=False, gpu=H200).config.name == "m128_n64_w8_s3"


def _stored_entry(key) -> Path:
    (path,) = choice_cache.cache_dir().glob("*.json")
    assert json.loads(path.read_text())["key"] == key
    return path


@pytest.mark.parametrize("damage", ["truncated", "foreign key", "unknown config", "wrong schema", "other triton"])
def test_a_corrupt_or_foreign_entry_is_ignored_and_tuned_again(monkeypatch, damage):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    timed: list = []
    monkeypatch.setattr(tuner, "time_candidates", _timing_picks(["m64_n64_w4_s3"], timed))
    q = _fa_paper_query()
    tuner.choose(q, q, q, q, causal=False, gpu=H200)
    key = choice_cache.choice_key(H200, "b16_h32_s1024_d64", "fp16", False)
    path = _stored_entry(key)
    entry = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:40])
    else:
        entry.update(
            {
                "foreign key": {"key": {**key, "gpu": "NVIDIA B200"}},
                "unknown config": {"config": "m999"},
                "wrong schema": {"schema": "something.else"},
                "other triton": {"key": {**key, "triton": "0.0.1"}},
            }[damage]
        )
        path.write_text(json.dumps(entry))
    tuner.forget_choices()
    choice = tuner.choose(q, q, q, q, causal=False, gpu=H200)
    assert choice.source == "tuned" and len(timed) == 2


def test_the_first_writer_wins_and_the_loser_runs_its_pick(tmp_path):
    table = load_table()
    key = choice_cache.choice_key(H200, "b16_h32_s1024_d64", "fp16", False)
    first = choice_cache.store(key, "m64_n64_w4_s3", [], tmp_path)
    second = choice_cache.store(key, "m128_n64_w8_s3", [], tmp_path)
    assert first["config"] == second["config"] == "m64_n64_w4_s3"
    assert choice_cache.load(key, table, 1024, tmp_path)["config"] == "m64_n64_w4_s3"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_cache_location_is_documented_and_overridable(tmp_path):
    assert choice_cache.cache_dir({choice_cache.DIR_ENV: str(tmp_path)}) == tmp_path
    assert choice_cache.cache_dir({"ATTNWATCH_CACHE": str(tmp_path)}) == tmp_path / "triton-choices" / "local"
    assert (
        choice_cache.cache_dir({"ATTNWATCH_CACHE": str(tmp_path), "ATTNWATCH_TRUST": "untrusted"})
        == tmp_path / "triton-choices" / "untrusted"
    )  # a pull request's job never writes what main reads
