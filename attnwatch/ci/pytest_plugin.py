"""pytest plugin (entry point `pytest11: attnwatch`): the `gpu_benchmark` fixture.

A kernel repository's own pytest-benchmark suite measures with attnwatch's recipe by asking
for the fixture instead of `benchmark`:

    def test_softmax(gpu_benchmark):
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        gpu_benchmark(my_softmax, x, reference=torch_softmax, flops=5 * x.numel(),
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
its one writer), the machine's Environment in `machine_info["attnwatch_environment"]`, and the
repository in `commit_info["project"]` as OWNER/NAME (ci.environment.repository_identity, the
rule of `attnwatch run` and `env`; pytest-benchmark itself writes a bare basename there).
`attnwatch ingest out.json` stores all of it; `attnwatch compare --pytest` A/B's the suite.

Case and series names (the `test_` prefix dropped, a reference named after its function) are
ci/plugin_cases.py's. A failed correctness check fails the test after it is recorded: the
output must pass a per-element and a norm-relative bound (ci/plugin_correctness.py), per dtype
from ci/gpu_benchmark_tolerances.toml unless the test passes `atol=`, `rtol=`, `norm_rtol=`.
Under `--benchmark-disable` the output is checked and nothing is measured. A misused fixture (a
tensor where the function belongs, a second call in one test, a bound that is not a number)
fails its test with one line saying so.

On a CPU the engine measures with one intra-op thread (torch.set_num_threads(1), which the
record's timing_note says); the test's own thread count is restored after each measurement, so
the rest of the session runs as it would without the plugin.

Options: `--gpu-benchmark-device auto|cuda|cpu` (default auto: CUDA when torch sees a GPU).
Where attnwatch is not installed (a checkout on the path), `-p attnwatch.ci.pytest_plugin`
loads the plugin; where it is, that would load it a second time, which pytest refuses:
`plugin_args()` says which applies.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest

MEASUREMENT_STATS_LABEL = "attnwatch_stats_are"  # what pytest-benchmark's own stats are, as a run labels them


ENTRY_POINT = ("pytest11", "attnwatch")  # pyproject.toml's [project.entry-points.pytest11]


def plugin_args() -> list[str]:
    """The pytest arguments that load this plugin here: none where its entry point is installed."""
    from importlib.metadata import entry_points

    group, name = ENTRY_POINT
    return [] if any(ep.name == name for ep in entry_points(group=group)) else ["-p", __name__]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("attnwatch")
    group.addoption(
        "--gpu-benchmark-device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="where gpu_benchmark measures (default: CUDA when torch sees a GPU, else the CPU, said so in each record)",
    )


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


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_commit_info(config: Any, commit_info: dict) -> None:
    """The repository as OWNER/NAME (ci.environment.repository_identity, as `attnwatch run`
    records it) in place of pytest-benchmark's bare basename; only in a session that measured
    with gpu_benchmark (a plain file's bare name is mapped at ingest: history.contract.repository)."""
    if config.stash.get(_ENGINE_KEY, None) is None:
        return
    from attnwatch.ci.environment import repository_identity

    commit_info["project"] = repository_identity(config.rootpath)


_ENGINE_KEY = pytest.StashKey[Any]()
_CLAIMS_KEY = pytest.StashKey[Any]()


def _engine(config: Any) -> Any:
    """The process's one CallableEngine (device opened once)."""
    engine = config.stash.get(_ENGINE_KEY, None)
    if engine is None:
        from attnwatch.ci.engine.callables import CallableEngine

        engine = config.stash[_ENGINE_KEY] = CallableEngine(_device_kind(config.getoption("gpu_benchmark_device")))
    return engine


def _claims(config: Any) -> Any:
    """The session's record of which test stores each case (ci/plugin_cases.py)."""
    claims = config.stash.get(_CLAIMS_KEY, None)
    if claims is None:
        from attnwatch.ci.plugin_cases import Claims

        claims = config.stash[_CLAIMS_KEY] = Claims()
    return claims


def _device_kind(option: str) -> str:
    import torch

    if option == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if option == "cuda" and not torch.cuda.is_available():
        raise pytest.UsageError("--gpu-benchmark-device cuda: torch sees no CUDA device here")
    return option


@pytest.fixture
def gpu_benchmark(request: Any, benchmark: Any) -> Iterator["GpuBenchmark"]:
    """Measure a call with attnwatch's recipe (module docstring); returns its output."""
    fixture = GpuBenchmark(request, benchmark)
    yield fixture
    if fixture.calls and not fixture.timed:
        # Called, but nothing was timed (--benchmark-disable, a usage error, a failed timing): the
        # test's own line says why, so pytest-benchmark's "fixture was not used at all" is not added.
        benchmark.skipped = True


class GpuBenchmark:
    def __init__(self, request: Any, benchmark: Any) -> None:
        self.request = request
        self.benchmark = benchmark
        self.calls = 0  # calls of the fixture in this test
        self.timed = False  # pytest-benchmark's own timing ran

    def __call__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        reference: Callable[..., Any] | None = None,
        expected: Any = None,
        check: Callable[[Any], Any] | None = None,
        flops: float | None = None,
        bytes: float | None = None,
        atol: float | None = None,
        rtol: float | None = None,  # noqa: A002
        norm_rtol: float | None = None,
        name: str | None = None,
        reference_name: str | None = None,
        dtype: str | None = None,
        **kwargs: Any,
    ) -> Any:
        from attnwatch.ci.plugin_cases import dtype_of, reference_name as reference_series, series_name, variant_name
        from attnwatch.ci.plugin_correctness import Bounds, ToleranceUsageError, bounds_for, correctness_record

        self.calls += 1
        _refuse(_usage_problem(self.calls, fn, reference, check, flops, bytes))
        node = self.request.node
        variant = variant_name(name, getattr(node, "originalname", None) or node.name)
        callspec = getattr(node, "callspec", None)
        shape = series_name(callspec.id) if callspec is not None else "default"
        dtype = series_name(dtype or dtype_of(args) or "na")
        case_id = f"{variant}/{shape}/{dtype}"
        ref_id = f"{reference_series(reference_name, reference, variant)}/{shape}/{dtype}" if reference else None
        other = _claims(self.request.config).claim(case_id, node.nodeid)
        if other:
            _refuse(f"{case_id} is already measured by {other}: give one of the two tests name=")
        call = lambda: fn(*args, **kwargs)  # noqa: E731
        ref_call = (lambda: reference(*args, **kwargs)) if reference is not None else None  # noqa: E731
        out = _synchronized(call)
        if expected is None and ref_call is not None:
            expected = _synchronized(ref_call)
        correctness = None
        if expected is not None or check is not None:
            try:
                bounds, problem = bounds_for(dtype, atol, rtol, norm_rtol), None
            except ToleranceUsageError as exc:
                bounds, problem = Bounds(0.0, 0.0, 0.0), str(exc)  # check= alone applies no tolerance
            _refuse(problem if expected is not None else None)
            correctness = correctness_record(case_id, variant, shape, dtype, out, expected, check, bounds)
        if not getattr(self.benchmark, "disabled", False):  # --benchmark-disable: checked, not measured
            with _threads_restored():
                self._measure(case_id, ref_id, (variant, shape, dtype), call, ref_call, correctness, flops, bytes)
        if correctness is not None and not correctness.passed:
            pytest.fail(f"{case_id}: incorrect output: {correctness.error or _spoken(correctness)}", pytrace=False)
        return out

    def _measure(
        self,
        case_id: str,
        ref_id: str | None,
        names: tuple[str, str, str],
        call: Callable[[], Any],
        ref_call: Callable[[], Any] | None,
        correctness: Any,
        flops: float | None,
        nbytes: float | None,
    ) -> None:
        """The engine's measurement into extra_info, then pytest-benchmark's own."""
        from attnwatch.ci.engine.callables import callable_timing, with_reference_gap
        from attnwatch.ci.timing.sampler import Subject
        from attnwatch.history.contract.pytest_record import MEASUREMENT_KEY, Measurement, measurement_block

        engine = _engine(self.request.config)
        variant, shape, dtype = names
        subjects = [Subject(case_id, call)] + (
            [Subject(ref_id, ref_call)] if ref_id is not None and ref_call is not None else []
        )
        raws, group_id = engine.measure(subjects, case_id)
        failed = [raw.error for raw in raws.values() if raw.error or not raw.samples_us]
        if failed:
            pytest.fail(f"{case_id}: timing failed: {failed[0] or 'no samples'}", pytrace=False)
        timing = callable_timing(case_id, variant, shape, dtype, raws[case_id], group_id, flops, nbytes)
        ref_timing = None
        if ref_id is not None:
            ref_timing = callable_timing(
                ref_id, ref_id.split("/", 1)[0], shape, dtype, raws[ref_id], group_id, flops, nbytes
            )
            with_reference_gap(timing, ref_timing)
        measurement = Measurement(
            timing=timing,
            timing_note=engine.note,
            samples_us=raws[case_id].samples_us,
            flops_per_call=float(flops) if flops else None,
            bytes_per_call=float(nbytes) if nbytes else None,
            bandwidth_gbps=(nbytes / (timing.median_us * 1e-6) / 1e9) if nbytes else None,
            correctness=correctness,
            reference=ref_timing,
            reference_samples_us=raws[ref_id].samples_us if ref_id is not None else [],
        )
        block = measurement_block(measurement)
        if ref_id is not None:
            _claims(self.request.config).keep_reference(block, ref_id, self.request.node.nodeid)
        self.benchmark.extra_info[MEASUREMENT_KEY] = block
        self._host_timing(engine, call)

    def _host_timing(self, engine: Any, call: Callable[[], Any]) -> None:
        """pytest-benchmark's own statistics: a second, labelled host measurement (as a run's)."""
        from attnwatch.ci.suites.test_bench import CPU_STATS_LABEL, HOST_STATS_LABEL

        cuda = engine.device_kind == "cuda"
        self.benchmark.extra_info[MEASUREMENT_STATS_LABEL] = HOST_STATS_LABEL if cuda else CPU_STATS_LABEL
        self.benchmark.pedantic(
            engine.host_call(call),
            setup=engine.before_host_call if cuda else None,
            rounds=engine.config.host_rounds,
            warmup_rounds=1,
        )
        self.timed = True


def _usage_problem(calls: int, fn: Any, reference: Any, check: Any, flops: Any, nbytes: Any) -> str | None:
    """What is wrong with how the fixture was called, in words; None when nothing is."""
    if calls > 1:
        return "measures one call per test (it was called again); parametrize the test to measure more"
    for what, value in (
        ("the first argument, the function to measure,", fn),
        ("reference=", reference),
        ("check=", check),
    ):
        if value is not None and not callable(value):
            example = " (gpu_benchmark(my_kernel, x), not gpu_benchmark(my_kernel(x)))" if value is fn else ""
            return f"{what} must be a function; got {type(value).__name__}{example}"
    for what, value in (("flops=", flops), ("bytes=", nbytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            return f"{what} must be a number >= 0 (the work of one call); got {value!r}"
    return None


def _refuse(problem: str | None) -> None:
    """Fail the test with one line naming the misuse (no traceback into the plugin)."""
    if problem:
        pytest.fail(f"gpu_benchmark: {problem}", pytrace=False)


@contextmanager
def _threads_restored() -> Iterator[None]:
    """torch's intra-op thread count as the test had it, after a measurement that pins it to one."""
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _synchronized(call: Callable[[], Any]) -> Any:
    """The call's output once the device has finished it (so an asynchronous error is its own)."""
    import torch

    out = call()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out


def _spoken(record: Any) -> str:
    return (
        f"{record.violations} element(s) outside atol {record.atol:g} + rtol {record.rtol:g}*|expected|, "
        f"max abs error {record.max_abs_err}"
    )
