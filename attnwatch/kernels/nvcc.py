"""Build pipeline for CUDA sources: nvcc with a content-addressed cache, the ptxas resource
report, and a cubin loader that launches on torch's current stream.

Why a cache keyed by content: CI builds every variant on every commit, but most commits touch
none of the `.cu` files; hashing the sources (and the local headers they include), the flags,
the target and the nvcc version makes an unchanged kernel a cache hit, and any change a rebuild.
The cache itself (kernels.compile_cache) is one private directory per trust level, and every
hit is verified against the sha256 recorded when it was built: a pull-request job can neither
plant a binary that a main job loads nor have a changed one loaded on a key match alone.

Every build passes `-Xptxas -v` so that the registers, shared memory and spills of each kernel
are recorded in the build report (`parse_ptxas_verbose`), and `-lineinfo` so that profilers can
map samples to source lines.

torch and cupy are imported lazily: compiling and parsing work on a host without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypedDict

from . import compile_cache
from .build_report import BuildReport
from .record_paths import Names, portable_command, portable_text

OUTPUT_KINDS = ("cubin", "shared")
LOG_TAIL_CHARS = 4000
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


class NvccError(RuntimeError):
    """nvcc failed (or is missing); the message names the source files and ends with the log tail."""

    def __init__(self, sources: Sequence[Path], message: str, log: str = "") -> None:
        self.sources = [str(s) for s in sources]
        self.log = log
        tail = log[-LOG_TAIL_CHARS:]
        text = f"{', '.join(self.sources)}: {message}" if self.sources else message
        super().__init__(f"{text}\n{tail}" if tail else text)


@dataclass(frozen=True)
class NvccResult:
    """One build: where the binary is, what nvcc printed, and whether it came from the cache.

    `log` and `command` are as the build record keeps them (kernels.record_paths): paths
    relative to the repository, named include folders, never this machine's layout.
    """

    path: Path
    log: str
    compile_seconds: float  # of the original compile, also when this result is a cache hit
    cached: bool
    source_hash: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reported for one entry function on one target."""

    kernel: str
    arch: str
    registers: int
    shared_mem_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    barriers: int | None = None
    cmem_bytes: dict[int, int] | None = None  # constant bank -> bytes, when ptxas prints it


# --------------------------------------------------------------------------- compiler


def default_cache_dir() -> Path:
    """`$ATTNWATCH_CACHE/nvcc/<trust>`, else `~/.cache/attnwatch/nvcc/<trust>` (kernels.compile_cache)."""
    return compile_cache.default_cache_dir("nvcc")


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str = "nvcc") -> str:
    """The `nvcc --version` text (part of every cache key); NvccError when nvcc is missing."""
    exe = shutil.which(nvcc)
    if exe is None:
        raise NvccError([], f"{nvcc} not found on PATH (install the CUDA toolkit to build CUDA variants)")
    done = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NvccError([], f"`{nvcc} --version` exited {done.returncode}", done.stderr)
    return done.stdout.strip()


def sm_arch(compute_capability: str) -> str:
    """`sm_XY` of a compute capability written "X.Y" (what torch and the environment record)."""
    major, minor = (int(part) for part in compute_capability.split("."))
    return f"sm_{major}{minor}"


def device_arch() -> str:
    """`sm_XY` of the current CUDA device (what "native" means); needs torch with CUDA."""
    import torch

    if not torch.cuda.is_available():
        raise NvccError([], 'arch "native" needs a CUDA device; pass an explicit arch such as "sm_90"')
    return sm_arch("{}.{}".format(*torch.cuda.get_device_capability()))


def arch_flags(arch: str) -> list[str]:
    """nvcc target flags. An `a` suffix (sm_90a) is only valid as a real+virtual pair."""
    match = re.fullmatch(r"sm_(\d+)(a?)", arch)
    if match is None:
        raise ValueError(f"arch must look like 'sm_90', 'sm_90a' or be 'native', got {arch!r}")
    number, suffix = match.groups()
    if suffix:
        return [f"-gencode=arch=compute_{number}a,code=sm_{number}a"]
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


def local_headers(source: Path, include_dirs: Sequence[Path]) -> list[Path]:
    """Every `#include "..."` header reachable from `source` that exists locally (transitively).

    System headers (`<...>`) are covered by the nvcc version in the key, not hashed.
    """
    found: list[Path] = []
    seen: set[Path] = set()
    stack = [source]
    while stack:
        current = stack.pop()
        for name in _INCLUDE_RE.findall(current.read_text(errors="replace")):
            for base in (current.parent, *include_dirs):
                candidate = (Path(base) / name).resolve()
                if candidate.is_file():
                    if candidate not in seen:
                        seen.add(candidate)
                        found.append(candidate)
                        stack.append(candidate)
                    break
    return sorted(found)


def source_hash(
    sources: Sequence[Path], *, output: str, arch: str, flags: Sequence[str], include_dirs: Sequence[Path]
) -> str:
    """sha256 over the sources and local headers (contents, not paths), flags, target and nvcc.

    Headers enter in an order that does not depend on where they live (file name, then content
    digest): the same headers copied to another folder, e.g. a GPU runner's carried copy, give
    the same key even when that folder sorts before or after the sources' own.
    """
    digest = hashlib.sha256()
    digest.update(nvcc_version().encode())
    digest.update(f"\0{output}\0{arch}\0".encode())
    for flag in flags:
        digest.update(flag.encode() + b"\0")
    for source in sources:
        _hash_file(digest, Path(source).name, Path(source).read_bytes())
        headers = [(h.name, h.read_bytes()) for h in local_headers(Path(source), include_dirs)]
        for name, data in sorted(headers, key=lambda item: (item[0], hashlib.sha256(item[1]).digest())):
            _hash_file(digest, name, data)
    return digest.hexdigest()


def _hash_file(digest: Any, name: str, data: bytes) -> None:
    digest.update(f"{name}\0{len(data)}\0".encode())
    digest.update(data)


def nvcc_compile(
    sources: Sequence[Path],
    *,
    output: str = "cubin",
    arch: str = "sm_90",
    flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = (),
    cache_dir: Path | None = None,
    include_names: Names | None = None,
) -> NvccResult:
    """Compile `sources` to a cubin (one source) or a shared library, through the cache.

    Raises NvccError (naming the sources, with the log tail) when nvcc fails, and ValueError for
    a bad `output` or `arch`. A cache hit returns the stored log and original compile time.
    `include_names` names folders for the record (e.g. the CUTLASS headers as `<cutlass-4.2.0>`);
    the result's command and log hold no absolute path (kernels.record_paths).
    """
    sources = [Path(s) for s in sources]
    if output not in OUTPUT_KINDS:
        raise ValueError(f"output must be one of {OUTPUT_KINDS}, got {output!r}")
    if not sources:
        raise ValueError("nvcc_compile needs at least one source")
    if output == "cubin" and len(sources) != 1:
        raise ValueError("a cubin is built from exactly one source (nvcc -cubin takes one input)")
    for source in sources:
        if not source.is_file():
            raise NvccError(sources, f"source not found: {source}")
    if arch == "native":
        arch = device_arch()
    target_flags = arch_flags(arch)
    include_dirs = [Path(d) for d in include_dirs]
    key = source_hash(sources, output=output, arch=arch, flags=flags, include_dirs=include_dirs)

    try:
        cache = compile_cache.CompileCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    except (compile_cache.UnsafeCacheError, ValueError) as exc:
        raise NvccError(sources, str(exc)) from None
    suffix = ".cubin" if output == "cubin" else ".so"
    hit = cache.lookup(key, suffix)
    if hit is not None:
        return _from_cache(hit, key, include_names)

    kind_flags = ["-cubin"] if output == "cubin" else ["-shared", "-Xcompiler", "-fPIC"]
    with cache.staging() as scratch:
        staged = Path(scratch) / f"out{suffix}"
        command = [
            "nvcc",
            *kind_flags,
            *target_flags,
            "-Xptxas",
            "-v",
            "-lineinfo",
            *(f"-I{d}" for d in include_dirs),
            *flags,
            *(str(s) for s in sources),
            "-o",
            str(staged),
        ]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - started
        log = done.stdout + done.stderr
        if done.returncode != 0 or not staged.is_file():
            raise NvccError(sources, f"nvcc exited {done.returncode} building for {arch}", log)
        recorded = portable_command(
            [part if part != str(staged) else f"{key}{suffix}" for part in command], include_names
        )
        log = portable_text(log, include_names)
        # Another process (the other side of a compare, building the same source in its own
        # checkout) may have stored this key while this one compiled. Its binary is kept: with
        # -lineinfo, ptxas writes the source file's path and time into the cubin, so the two
        # builds differ in bytes though not in code, and both sides must launch, and
        # fingerprint, one binary.
        raced = cache.lookup(key, suffix)
        if raced is not None:
            return _from_cache(raced, key, include_names)
        binary = cache.store(key, suffix, staged, {"log": log, "compile_seconds": seconds, "command": recorded})
    return NvccResult(binary, log, seconds, False, key, recorded)


def _from_cache(hit: compile_cache.CacheEntry, key: str, include_names: Names | None) -> NvccResult:
    """The result of a cache hit: the stored binary, log and original compile time. Entries written
    before paths were recorded portably are made portable on the way out."""
    meta = hit.meta
    return NvccResult(
        hit.binary,
        portable_text(meta["log"], include_names),
        meta["compile_seconds"],
        True,
        key,
        portable_command(meta["command"], include_names),
    )


# --------------------------------------------------------------------------- ptxas -v


_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"Used (\d+) registers")
_BARRIERS_RE = re.compile(r"used (\d+) barriers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[(\d+)\]")


def parse_ptxas_verbose(log: str) -> dict[str, ResourceUsage]:
    """Per entry function, the resources `ptxas -v` reported.

    The log is a sequence of blocks: "Compiling entry function 'K' for 'sm_90'", then
    "Function properties for K" followed by the stack/spill line, then "Used N registers, ...
    M bytes smem". Properties of non-entry device functions are ignored. With several targets
    in one log, the last block of a kernel wins. Missing numbers read as 0 (ptxas omits zero
    smem on some versions).
    """
    usages: dict[str, ResourceUsage] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    current: tuple[str, str] | None = None
    pending_props: str | None = None
    for line in log.splitlines():
        if m := _ENTRY_RE.search(line):
            current = (m.group(1), m.group(2))
            continue
        if m := _PROPS_RE.search(line):
            pending_props = m.group(1)
            continue
        if (m := _FRAME_RE.search(line)) and pending_props is not None:
            frames[pending_props] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            pending_props = None
            continue
        if (m := _USED_RE.search(line)) and current is not None:
            name, arch = current
            stack, stores, loads = frames.get(name, (0, 0, 0))
            smem = _SMEM_RE.search(line)
            barriers = _BARRIERS_RE.search(line)
            cmem = {int(bank): int(size) for size, bank in _CMEM_RE.findall(line)}
            usages[name] = ResourceUsage(
                kernel=name,
                arch=arch,
                registers=int(m.group(1)),
                shared_mem_bytes=int(smem.group(1)) if smem else 0,
                spill_store_bytes=stores,
                spill_load_bytes=loads,
                stack_frame_bytes=stack,
                barriers=int(barriers.group(1)) if barriers else None,
                cmem_bytes=cmem or None,
            )
            current = None
    return usages


class _BuildFields(TypedDict):
    """The BuildReport fields build_report fills the same whether or not ptxas named the kernel."""

    variant: str
    compile_seconds: float | None
    source_hash: str | None
    cached: bool
    log_tail: str
    config: dict[str, Any]


def build_report(variant_name: str, result: NvccResult, kernel_name: str) -> BuildReport:
    """The BuildReport for one kernel of a successful build.

    A kernel missing from the ptxas report (wrong name, or stripped) gives ok=False with the
    reason, rather than a report with blank resources.
    """
    usages = parse_ptxas_verbose(result.log)
    usage = usages.get(kernel_name)
    common = _BuildFields(
        variant=variant_name,
        compile_seconds=result.compile_seconds,
        source_hash=result.source_hash,
        cached=result.cached,
        log_tail=result.log[-LOG_TAIL_CHARS:],
        config={"command": " ".join(result.command), "kernel": kernel_name},
    )
    if usage is None:
        return BuildReport(
            ok=False,
            target=_target_of(result.command),
            error=f"kernel {kernel_name!r} not in the ptxas report (found: {', '.join(sorted(usages)) or 'none'})",
            **common,
        )
    return BuildReport(
        ok=True,
        target=usage.arch,
        registers_per_thread=usage.registers,
        shared_mem_bytes=usage.shared_mem_bytes,
        spill_store_bytes=usage.spill_store_bytes,
        spill_load_bytes=usage.spill_load_bytes,
        stack_frame_bytes=usage.stack_frame_bytes,
        **common,
    )


def failed_build_report(
    variant_name: str, error: Exception, target: str, include_names: Names | None = None
) -> BuildReport:
    """The BuildReport of a build that raised (NvccError keeps its log tail). The error keeps
    this machine's paths for whoever reads it here; the record gets them made portable."""
    log = portable_text(getattr(error, "log", "") or "", include_names)
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return BuildReport(
        variant=variant_name,
        ok=False,
        target=target,
        log_tail=log[-LOG_TAIL_CHARS:],
        error=portable_text(first_line, include_names),
    )


def _target_of(command: Sequence[str]) -> str:
    for part in command:
        if m := re.search(r"code=(sm_\w+)", part):
            return m.group(1)
    return ""


# --------------------------------------------------------------------------- loading and launching


class CubinKernel:
    """One `__global__` function of a cubin, launched on torch's current CUDA stream via CuPy.

    Arguments: torch tensors are passed by device pointer; every other argument must already be
    a sized numpy scalar (np.int32, np.float32, ...) because the kernel's C signature decides
    the width and a bare Python int would silently be passed as 64 bits.
    """

    def __init__(self, path: Path, name: str, *, dynamic_smem_bytes: int = 0) -> None:
        import cupy

        self.path = Path(path)
        self.name = name
        import torch

        # Load into the context of torch's current device, where the tensors and stream live.
        with cupy.cuda.Device(torch.cuda.current_device()):
            self._module = cupy.RawModule(path=str(self.path))
            self._function = self._module.get_function(name)
        self.dynamic_smem_bytes = int(dynamic_smem_bytes)
        if self.dynamic_smem_bytes > 48 * 1024:
            # The cudaFuncSetAttribute(MaxDynamicSharedMemorySize) opt-in beyond 48 KB.
            self._function.max_dynamic_shared_size_bytes = self.dynamic_smem_bytes

    @property
    def attributes(self) -> dict[str, Any]:
        """Registers, static smem and max threads as the driver sees the loaded function."""
        f = self._function
        return {
            "num_regs": f.num_regs,
            "shared_size_bytes": f.shared_size_bytes,
            "max_threads_per_block": f.max_threads_per_block,
            "local_size_bytes": f.local_size_bytes,
        }

    def bind(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> Callable[[], None]:
        """Convert the arguments once and return a zero-argument launch (the timed-region form).

        The launch passes raw device pointers, so it holds the tensors they point into
        (`launch.keep_alive`): a caller that keeps only the launch must not free its inputs.
        Without that, the harness (which keeps only the launch) dropped q, k and v; the caching
        allocator reused their blocks or, at `torch.cuda.empty_cache()` (which CUDA-graph capture
        calls), handed them back to the driver, and the kernel read freed memory: the illegal
        memory access of cuda_wmma's graph stage (docs/benchmarks.md).
        """
        converted = tuple(self._convert(index, arg) for index, arg in enumerate(args))
        function, shared_mem = self._function, self.dynamic_smem_bytes

        def launch() -> None:
            with _current_stream():  # cupy raises CUDADriverError when the launch is refused
                function(grid, block, converted, shared_mem=shared_mem)

        launch.keep_alive = tuple(args)  # type: ignore[attr-defined]  # mypy does not model a function's attributes; this one is only held
        return launch

    def __call__(self, grid: tuple[int, ...], block: tuple[int, ...], args: Sequence[Any]) -> None:
        self.bind(grid, block, args)()

    def _convert(self, index: int, arg: Any) -> Any:
        import numpy as np
        import torch

        if isinstance(arg, torch.Tensor):
            if not arg.is_cuda:
                raise ValueError(f"{self.name}: argument {index} is a CPU tensor")
            return np.uintp(arg.data_ptr())
        if isinstance(arg, np.generic):
            return arg
        raise TypeError(f"{self.name}: argument {index} is {type(arg).__name__}; pass a numpy scalar of the C type")


_streams: dict[tuple[int, int], Any] = {}


def _current_stream() -> Any:
    """A CuPy view of torch's current stream (one wrapper per stream handle and device, made once)."""
    import cupy
    import torch

    torch_stream = torch.cuda.current_stream()
    key = (torch_stream.cuda_stream, torch_stream.device_index)
    stream = _streams.get(key)
    if stream is None:
        stream = _streams[key] = cupy.cuda.ExternalStream(*key)
    return stream
