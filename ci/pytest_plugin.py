"""pytest plugin (entry point `pytest11: attnwatch`): the `gpu_benchmark` fixture.

A kernel repository's own pytest-benchmark suite measures with attnwatch's recipe by asking
for the fixture instead of `benchmark`:

    def test_softmax(gpu_benchmark):
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        gpu_benchmark(my_softmax, x, reference=lambda x: torch.softmax(x, -1), flops=5 * x.numel(),
                      bytes=2 * x.numel() * x.element_size())

Each call is measured by the callables' engine (ci/engine/callables.py: CUDA events with the
L2 flushed before every call, guarded blocks, stream pool, clocks and throttle reasons,
graph replay of a launch-bound call; host wall-clock `cpu_wall` on a CPU, which the record
says), interleaved with `reference=` when given (its gap is stored, and its output is what the
test's is checked against unless `expected=` is given). `check=` is a function of the output
that returns False or raises when it is wrong. pytest-benchmark's own `benchmark` is then
run too (host wall-clock per synchronized call, L2 flushed before each round), so
`pytest --benchmark-json=out.json` holds both, and the engine's record sits in the entry's
`extra_info["attnwatch_measurement"]` (history.contract.pytest_record, written and checked by
its one writer) and the machine's Environment in `machine_info["attnwatch_environment"]`.
`attnwatch ingest out.json` stores all of it; `attnwatch compare --pytest` A/B's the suite.

The case id is `<variant>/<shape>/<dtype>`: the variant is `name=` or the test function's
name, the shape the test's parameter id (`default` without one), the dtype `dtype=` or the
first tensor argument's. A failed correctness check fails the test after it is recorded;
`atol=`/`rtol=` override kernels/tolerances.toml's for the dtype. Under `--benchmark-disable`
the output is checked and nothing is measured.

Options: `--gpu-benchmark-device auto|cuda|cpu` (default auto: CUDA when torch sees a GPU).
Where attnwatch is not installed (a checkout on the path), `-p attnwatch.ci.pytest_plugin`
loads the plugin; where it is, that would load it a second time, which pytest refuses:
`plugin_args()` says which applies.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import pytest

MEASUREMENT_STATS_LABEL = "attnwatch_stats_are"  # what pytest-benchmark's own stats are, as a run labels them
_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


ENTRY_POINT = ("pytest11", "attnwatch")  # pyproject.toml's [project.entry-points.pytest11]


def plugin_args() -> list[str]:
    """The pytest arguments that load this plugin here: none where its entry point is installed."""
    from importlib.metadata import entry_points

    group, name = ENTRY_POINT
    return [] if any(ep.name == name for ep in entry_points(group=group)) else ["-p", __name__]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("attnwatch")
    group.addoption("--gpu-benchmark-device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="where gpu_benchmark measures (default: CUDA when torch sees a GPU, else the CPU, said so in each record)")


def pytest_configure(config: Any) -> None:
    """An explicit --gpu-benchmark-device cuda on a machine without one is a usage error at once."""
    if config.getoption("gpu_benchmark_device", "auto") == "cuda":
        _device_kind("cuda")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: Any, machine_info: dict) -> None:
    """The measuring machine's Environment (GPU model, driver, clocks), as a run bundle has it;
    only in a session that measured with gpu_benchmark."""
    engine = config.stash.get(_ENGINE_KEY, None)
    if engine is None:
        return
    from attnwatch.ci.environment import capture_environment
    from attnwatch.history.contract.pytest_record import ENVIRONMENT_KEY, environment_block

    machine_info[ENVIRONMENT_KEY] = environment_block(capture_environment(probe_device=engine.device_kind == "cuda"))


_ENGINE_KEY = pytest.StashKey[Any]()


def _engine(config: Any) -> Any:
    """The process's one CallableEngine (device opened once)."""
    engine = config.stash.get(_ENGINE_KEY, None)
    if engine is None:
        from attnwatch.ci.engine.callables import CallableEngine

        engine = config.stash[_ENGINE_KEY] = CallableEngine(_device_kind(config.getoption("gpu_benchmark_device")))
    return engine


def _device_kind(option: str) -> str:
    import torch

    if option == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if option == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--gpu-benchmark-device cuda: torch sees no CUDA device here")
    return option


@pytest.fixture
def gpu_benchmark(request: Any, benchmark: Any) -> "GpuBenchmark":
    """Measure a call with attnwatch's recipe (module docstring); returns its output."""
    return GpuBenchmark(request, benchmark)


class GpuBenchmark:
    def __init__(self, request: Any, benchmark: Any) -> None:
        self.request = request
        self.benchmark = benchmark

    def __call__(self, fn: Callable[..., Any], *args: Any, reference: Callable[..., Any] | None = None,
                 expected: Any = None, check: Callable[[Any], Any] | None = None, flops: float | None = None,
                 bytes: float | None = None, atol: float | None = None, rtol: float | None = None,  # noqa: A002
                 name: str | None = None, dtype: str | None = None, **kwargs: Any) -> Any:
        from attnwatch.ci.plugin_correctness import correctness_record

        node = self.request.node
        variant = _name(name or getattr(node, "originalname", None) or node.name)
        callspec = getattr(node, "callspec", None)
        shape = _name(callspec.id) if callspec is not None else "default"
        dtype = _name(dtype or _dtype_of(args) or "na")
        case_id = f"{variant}/{shape}/{dtype}"
        call = lambda: fn(*args, **kwargs)  # noqa: E731
        ref_call = (lambda: reference(*args, **kwargs)) if reference is not None else None  # noqa: E731
        out = _synchronized(call)
        if expected is None and ref_call is not None:
            expected = _synchronized(ref_call)
        correctness = None
        if expected is not None or check is not None:
            correctness = correctness_record(case_id, variant, shape, dtype, out, expected, check, atol, rtol)
        if not getattr(self.benchmark, "disabled", False):  # --benchmark-disable: checked, not measured
            self._measure(case_id, (variant, shape, dtype), call, ref_call, correctness, flops, bytes)
        if correctness is not None and not correctness.passed:
            pytest.fail(f"{case_id}: incorrect output: {correctness.error or _spoken(correctness)}", pytrace=False)
        return out

    def _measure(self, case_id: str, names: tuple[str, str, str], call: Callable[[], Any],
                 ref_call: Callable[[], Any] | None, correctness: Any, flops: float | None,
                 nbytes: float | None) -> None:
        """The engine's measurement into extra_info, then pytest-benchmark's own."""
        from attnwatch.ci.engine.callables import callable_timing, with_reference_gap
        from attnwatch.ci.timing.engine import Subject
        from attnwatch.history.contract.pytest_record import MEASUREMENT_KEY, Measurement, measurement_block

        engine = _engine(self.request.config)
        variant, shape, dtype = names
        ref_id = f"{variant}.reference/{shape}/{dtype}"
        subjects = [Subject(case_id, call)] + ([Subject(ref_id, ref_call)] if ref_call is not None else [])
        raws, group_id = engine.measure(subjects, f"{variant}/{shape}/{dtype}")
        failed = [raw.error for raw in raws.values() if raw.error or not raw.samples_us]
        if failed:
            pytest.fail(f"{case_id}: timing failed: {failed[0] or 'no samples'}", pytrace=False)
        timing = callable_timing(case_id, variant, shape, dtype, raws[case_id], group_id, flops, nbytes)
        ref_timing = None
        if ref_call is not None:
            ref_timing = callable_timing(ref_id, f"{variant}.reference", shape, dtype, raws[ref_id], group_id, flops,
                                         nbytes)
            with_reference_gap(timing, ref_timing)
        measurement = Measurement(
            timing=timing, timing_note=engine.note, samples_us=raws[case_id].samples_us,
            flops_per_call=float(flops) if flops else None, bytes_per_call=float(nbytes) if nbytes else None,
            bandwidth_gbps=(nbytes / (timing.median_us * 1e-6) / 1e9) if nbytes else None, correctness=correctness,
            reference=ref_timing, reference_samples_us=raws[ref_id].samples_us if ref_call is not None else [])
        self.benchmark.extra_info[MEASUREMENT_KEY] = measurement_block(measurement)
        self._host_timing(engine, call)

    def _host_timing(self, engine: Any, call: Callable[[], Any]) -> None:
        """pytest-benchmark's own statistics: a second, labelled host measurement (as a run's)."""
        from attnwatch.ci.suites.test_bench import CPU_STATS_LABEL, HOST_STATS_LABEL

        cuda = engine.device_kind == "cuda"
        self.benchmark.extra_info[MEASUREMENT_STATS_LABEL] = HOST_STATS_LABEL if cuda else CPU_STATS_LABEL
        self.benchmark.pedantic(engine.host_call(call), setup=engine.before_host_call if cuda else None,
                                rounds=engine.config.host_rounds, warmup_rounds=1)


def _synchronized(call: Callable[[], Any]) -> Any:
    """The call's output once the device has finished it (so an asynchronous error is its own)."""
    import torch

    out = call()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out


def _name(text: str) -> str:
    """A series name (history.contract.names NAME) from pytest's: other characters become '-'."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "-", text).strip("-.+_")[:128]
    return name or "default"


def _dtype_of(args: tuple) -> str | None:
    for arg in args:
        dtype = getattr(arg, "dtype", None)
        if dtype is not None:
            text = str(dtype).removeprefix("torch.")
            return _DTYPES.get(text, text)
    return None


def _spoken(record: Any) -> str:
    return (f"{record.violations} element(s) outside atol {record.atol:g} + rtol {record.rtol:g}*|expected|, "
            f"max abs error {record.max_abs_err}")
