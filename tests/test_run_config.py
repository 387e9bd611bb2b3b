"""A default lives in one place: ci/run_config.toml, read by ci/run_config.py alone.

The options of a run, a compare and a worker take every setting they do not get from the
command line from that file, and no module of ci/ writes one of its values again as a literal
default of a field or parameter of the same name.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from attnwatch.ci.compare.sequential import SequentialDesign
from attnwatch.ci.compare.session import SessionOptions
from attnwatch.ci.compare.side import Side
from attnwatch.ci.plan import RunPlan
from attnwatch.ci.run_config import CONFIG_PATH, default, default_dtypes, setting, timing_config
from attnwatch.ci.supervisor import RunOptions
from attnwatch.ci.workers.client import WorkerSpec
from attnwatch.kernels.shapes import SHAPE_SETS

ROOT = Path(__file__).resolve().parent.parent
TOML = tomllib.loads(CONFIG_PATH.read_text(encoding="utf-8"))
DEFAULTS = TOML["defaults"]
# Field names that hold a TOML entry under another name.
ALIASES = {"max_restarts": "max_child_restarts", "case_timeout_s": "case_timeout_cuda_s"}
# A primitive's own neutral value under the same name, not a setting of the run.
NOT_SETTINGS = {("ci/timing/timers.py", "streams"): "CudaEventTimer times on one stream unless given a pool"}


def _toml_names() -> set[str]:
    names = {k for k, v in DEFAULTS.items() if not isinstance(v, dict)}
    names |= {k for k, v in TOML["compare"].items() if not isinstance(v, dict)}
    for section in ("timing", "compare"):
        names |= {k for table in TOML[section].values() if isinstance(table, dict) for k in table}
    return names


def test_run_and_worker_options_take_the_file_s_values():
    for kind in ("cuda", "cpu"):
        options = RunOptions(shape_set="pr", device_kind=kind, timing=timing_config(kind))
        assert options.case_timeout_s == DEFAULTS[f"case_timeout_{kind}_s"]
        assert (options.build_timeout_s, options.startup_timeout_s, options.ncu_timeout_s) == (
            DEFAULTS["build_timeout_s"],
            DEFAULTS["startup_timeout_s"],
            DEFAULTS["ncu_timeout_s"],
        )
        assert (options.correctness_seeds, options.timing_seed, options.max_restarts) == (
            DEFAULTS["correctness_seeds"],
            DEFAULTS["timing_seed"],
            DEFAULTS["max_child_restarts"],
        )
        plan = RunPlan(cases=[], timing=timing_config(kind).to_dict(), device_kind=kind)
        assert (plan.correctness_seeds, plan.timing_seed) == (DEFAULTS["correctness_seeds"], DEFAULTS["timing_seed"])
        spec = WorkerSpec(plan=plan, side="head", checkout=None, work_dir=Path("unused"))
        assert (spec.case_timeout_s, spec.build_timeout_s, spec.startup_timeout_s) == (
            DEFAULTS[f"case_timeout_{kind}_s"],
            DEFAULTS["build_timeout_s"],
            DEFAULTS["startup_timeout_s"],
        )
        assert Side("head", spec).max_restarts == DEFAULTS["max_child_restarts"]
    given = RunOptions(shape_set="pr", device_kind="cpu", timing=timing_config("cpu"), case_timeout_s=7.0)
    assert given.case_timeout_s == 7.0
    # Each instance gets its own copy of a list: changing one run's seeds changes no other's.
    first = RunOptions(shape_set="pr", device_kind="cpu", timing=timing_config("cpu"))
    first.correctness_seeds.append(99)
    assert (
        RunOptions(shape_set="pr", device_kind="cpu", timing=timing_config("cpu")).correctness_seeds
        == DEFAULTS["correctness_seeds"]
    )
    assert default("correctness_seeds") == DEFAULTS["correctness_seeds"]


def test_compare_options_take_the_file_s_values():
    for kind in ("cuda", "cpu"):
        options = SessionOptions(
            device_kind=kind,
            timing=timing_config(kind),
            sampling={},
            design=SequentialDesign(3, 8, 0.95),
            min_effect=0.02,
        )
        assert (options.method, options.resamples) == (TOML["compare"]["method"], TOML["compare"]["resamples"])
        assert options.case_timeout_s == DEFAULTS[f"case_timeout_{kind}_s"]
        assert options.workers_per_side == TOML["compare"][kind]["workers_per_side"]
        assert (options.max_restarts, options.timing_seed) == (DEFAULTS["max_child_restarts"], DEFAULTS["timing_seed"])


def test_every_shape_set_has_its_dtypes_and_a_missing_entry_names_the_file():
    for name in (*SHAPE_SETS, "custom"):
        assert default_dtypes(name) == DEFAULTS["dtypes"][name]
    with pytest.raises(KeyError, match=r"run_config\.toml: no bogus in \[defaults\.dtypes\]"):
        default_dtypes("bogus")
    with pytest.raises(KeyError, match=r"run_config\.toml: no nothing in \[compare\.cpu\]"):
        setting("compare.cpu", "nothing")


def test_no_module_of_ci_repeats_a_value_of_the_file_as_a_literal_default():
    names = _toml_names()
    repeated = []
    for path in sorted((ROOT / "ci").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            pairs = []
            if isinstance(node, ast.ClassDef):  # dataclass fields: `name: type = value`
                pairs = [
                    (s.target.id, s.value)
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None
                ]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = node.args.posonlyargs + node.args.args
                pairs = list(
                    zip([a.arg for a in positional[len(positional) - len(node.args.defaults) :]], node.args.defaults)
                )
                pairs += [(a.arg, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
            for name, value in pairs:
                literal = isinstance(value, ast.Constant) and value.value is not None or isinstance(value, ast.List)
                where = (str(path.relative_to(ROOT)), name)
                if ALIASES.get(name, name) in names and literal and where not in NOT_SETTINGS:
                    repeated.append(f"{path.relative_to(ROOT)}:{value.lineno} {name}")
    assert repeated == []


def test_the_metrics_reference_states_the_sampling_targets_the_config_holds():
    """docs/reference/metrics.md's latency row says when sampling stops: the GPU's target and the
    CPU's, as [timing.cuda] and [timing.cpu] hold them (the README once said 1% for both)."""
    readme = (ROOT / "docs" / "reference" / "metrics.md").read_text(encoding="utf-8")
    cuda, cpu = (timing_config(kind).target_rel_spread for kind in ("cuda", "cpu"))
    assert f"sampled until IQR/median ≤ {cuda:.0%} ({cpu:.0%} on a CPU's host wall clock" in readme


def test_a_compare_s_sampling_overrides_only_timing_settings_and_takes_no_graph_replay():
    """The worker applies [compare.<kind>] to its TimingConfig every round (Engine.measure): a key
    that is no TimingConfig field would fail every round; on CUDA no case is under the graph
    threshold, so no round pays for replays the verdict never reads."""
    from dataclasses import fields

    from attnwatch.ci.run_config import TimingConfig, compare_sampling

    names = {f.name for f in fields(TimingConfig)}
    for kind in ("cuda", "cpu"):
        sampling = compare_sampling(kind)
        assert set(sampling) <= names, sorted(set(sampling) - names)
        assert timing_config(kind).with_overrides(**sampling).graph_threshold_us == 0.0
    assert timing_config("cuda").graph_threshold_us > 0  # `attnwatch run` still records it
