"""Capture where and on what a run was measured: git state, GPU, driver, CUDA, package versions.

Two layers, because the parent of a run must never create a CUDA context (a kernel that
poisons the context must only kill the child):

* `capture_git(repo_dir)` and `capture_environment(probe_device=False)` use only
  subprocess `git`, NVML (nvidia-ml-py, no CUDA context) and package metadata;
* `device_properties()` asks torch for compute capability, SM count, L2 size and the
  device's UUID and PCI bus id, which creates a context: the measuring child calls it and
  journals the result, and `attnwatch env` (a process of its own) calls it directly.

NVML is read for the GPU the run uses, never simply NVML's device 0: the parent picks it from
CUDA_VISIBLE_DEVICES, the child by torch's UUID (ci.gpu_identity).

A CPU-only machine yields a valid `Environment` with `device_kind="cpu"` and GPU fields None.
Everything here degrades to None with the reason left out rather than guessing a value.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from attnwatch.ci.errors import UserError
from attnwatch.ci.gpu_identity import find_gpu, open_handle, pci_from_parts
from attnwatch.history.contract.bundle import Environment
from attnwatch.history.contract.repository import LOCAL_OWNER, REPO_ENV, repo_setting
from attnwatch.history.contract.series_key import pool_problem


@dataclass
class GitInfo:
    """The commit a run measured. `sha` is "unknown" outside a repository."""

    sha: str = "unknown"
    parent_sha: str | None = None
    branch: str | None = None
    dirty: bool = False
    message: str | None = None
    date: str | None = None  # committer date, ISO 8601
    repo: str = ""  # OWNER/NAME: repository_identity()
    pr_number: int | None = None


def _git(repo_dir: Path, *args: str) -> str | None:
    """One git command's stdout, or None when git is missing, fails, or this is no repository."""
    if shutil.which("git") is None:
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(repo_dir), *args],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()


def repo_slug_from_url(url: str) -> str | None:
    """`owner/name` from a GitHub-style remote URL (https or ssh); None if it does not parse."""
    match = re.search(r"[:/]([^/:]+)/([^/]+?)(?:\.git)?/?$", url.strip())
    if not match:
        return None
    return f"{match.group(1)}/{match.group(2)}"


def repository_identity(repo_dir: Path | str, env: Mapping[str, str] | None = None) -> str:
    """The repository a measurement of `repo_dir` is of, as OWNER/NAME: the one rule every writer
    uses (`attnwatch run` and `env` through capture_git, the pytest plugin, compare.json).

    In order: the setting ATTNWATCH_REPO (history.contract.repository, what a history checks runs
    against); GITHUB_REPOSITORY in a workflow; the `origin` remote's owner/name; else
    `local/<NAME>`, NAME the directory of the repository's main checkout (a git worktree of it
    counts as that checkout), or of `repo_dir` outside any repository. Never empty. Two
    checkouts without a remote in directories of one name share `local/<NAME>`: set
    ATTNWATCH_REPO to tell them apart.
    """
    env = os.environ if env is None else env
    setting = repo_setting(env.get(REPO_ENV, ""))
    if setting:
        return setting
    if env.get("GITHUB_REPOSITORY", "").strip():
        return env["GITHUB_REPOSITORY"].strip()
    repo_dir = Path(repo_dir)
    remote = _git(repo_dir, "config", "--get", "remote.origin.url")
    slug = repo_slug_from_url(remote) if remote else None
    if slug:
        return slug
    common = _git(repo_dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
    top = (
        Path(common).parent
        if common and Path(common).name == ".git"
        else Path(_git(repo_dir, "rev-parse", "--show-toplevel") or repo_dir)
    )
    return local_identity(top.resolve().name)


def local_identity(name: str) -> str:
    """`local/<name>` with the characters a repository setting allows ('-' for the others)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip("-.") or "unnamed"
    return f"{LOCAL_OWNER}/{cleaned[:100]}"


def pr_number_from_ref(ref: str | None) -> int | None:
    """GitHub's `refs/pull/<n>/merge` (or `/head`) to n; None for any other ref."""
    if not ref:
        return None
    match = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", ref.strip())
    return int(match.group(1)) if match else None


def capture_git(repo_dir: Path | str, env: dict[str, str] | None = None) -> GitInfo:
    """Commit, parent, branch, dirty flag, message and date of `repo_dir`.

    GitHub Actions variables win where the checkout cannot know: a PR job checks out a
    detached merge commit, so the branch comes from GITHUB_HEAD_REF (PRs) or GITHUB_REF_NAME,
    and the PR number from GITHUB_REF. Outside a repository the sha is "unknown". The
    repository is ATTNWATCH_REPO where set (the one setting a history checks runs against,
    history.contract.repository), else GITHUB_REPOSITORY, else the origin remote's owner/name, else
    `local/<directory>` (repository_identity).
    """
    env = dict(os.environ if env is None else env)
    repo_dir = Path(repo_dir)
    info = GitInfo()
    sha = _git(repo_dir, "rev-parse", "HEAD")
    if sha:
        info.sha = sha
        info.parent_sha = _git(repo_dir, "rev-parse", "--verify", "--quiet", "HEAD^") or None
        branch = _git(repo_dir, "symbolic-ref", "--quiet", "--short", "HEAD")
        info.branch = branch or None  # detached HEAD: no branch
        status = _git(repo_dir, "status", "--porcelain", "--untracked-files=no")
        info.dirty = bool(status)
        info.message = _git(repo_dir, "log", "-1", "--format=%B", "HEAD")
        info.date = _git(repo_dir, "log", "-1", "--format=%cI", "HEAD")
    elif env.get("GITHUB_SHA"):
        info.sha = env["GITHUB_SHA"]
    info.repo = repository_identity(repo_dir, env)
    head_ref = env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME")
    if head_ref:
        info.branch = head_ref
    info.pr_number = pr_number_from_ref(env.get("GITHUB_REF"))
    return info


def package_version(name: str) -> str | None:
    """Installed distribution version, read from metadata (imports nothing heavy)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def optional_package_versions() -> dict[str, str | None]:
    """The installed version of each distribution kernels/optional_packages.py records (None:
    not installed). The list comes from the kernels this process runs; a revision's kernels from
    before the list record none ({}), so a compare against one measures everything."""
    try:
        from attnwatch.kernels import optional_packages
    except ImportError:  # a revision's kernels from before optional_packages.py
        return {}
    installed = getattr(optional_packages, "installed_versions", None)
    return installed() if installed is not None else {}


def nvcc_version() -> str | None:
    """`release X.Y, VX.Y.Z` line of `nvcc --version`, as the version string."""
    if shutil.which("nvcc") is None:
        return None
    try:
        out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return match.group(2) if match else None


def torch_version_info() -> tuple[str | None, str | None]:
    """(torch version, CUDA version torch was built with) without touching the GPU.

    Read from torch's generated `torch/version.py` (literal assignments of `__version__` and
    `cuda`) without importing torch: the run's parent records the environment but never runs a
    kernel, and importing torch cost it about 1.9 s on a 2-core CPU. Where that file cannot be
    read as such (an unusual install), torch is imported and asked."""
    if package_version("torch") is None:
        return None, None
    from_file = _torch_version_file()
    if from_file is not None:
        return from_file
    import torch  # lazily: dashboard hosts have no torch

    return torch.__version__, torch.version.cuda


def _torch_version_file() -> tuple[str, str | None] | None:
    """(`__version__`, `cuda`) as torch/version.py assigns them, or None where it cannot say."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
        folders = list(spec.submodule_search_locations or []) if spec else []
        tree = ast.parse((Path(folders[0]) / "version.py").read_text(encoding="utf-8"))
    except (ImportError, IndexError, OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    values: dict[str, object] = {}
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    version, cuda = values.get("__version__"), values.get("cuda")
    if not isinstance(version, str) or not (cuda is None or isinstance(cuda, str)):
        return None
    return version, cuda


@dataclass
class NvmlGpu:
    """The GPU this process uses, read through NVML: identity, driver and clocks.

    `uuid`, `pci_bus_id` and `nvml_index` name the physical GPU (NVML's index, not CUDA's
    ordinal); `mig_uuid` the MIG slice when the run is confined to one; `count` is how many
    GPUs the host has."""

    name: str
    uuid: str
    driver_version: str
    cuda_driver_version: str | None
    sm_clock_mhz: int | None
    sm_clock_max_mhz: int | None
    count: int
    pci_bus_id: str | None = None
    nvml_index: int | None = None
    mig_uuid: str | None = None
    power_limit_w: float | None = None  # the enforced power limit (None: NVML cannot say)


def load_pynvml() -> Any:
    """The pynvml module (package nvidia-ml-py), or None where it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def nvml_gpu(
    ordinal: int = 0, *, uuid: str | None = None, pci_bus_id: str | None = None, env: Mapping[str, str] | None = None
) -> NvmlGpu | None:
    """The GPU this process uses, through NVML (no CUDA context); None without NVML or a GPU.

    Given torch's `uuid` / `pci_bus_id` of the device in use (the measuring child), that GPU;
    otherwise CUDA device `ordinal` under `CUDA_VISIBLE_DEVICES` (ci.gpu_identity), so a runner
    pinned to GPU 1 records GPU 1, not NVML's device 0. None when the variable hides every GPU.
    """
    pynvml = load_pynvml()
    if pynvml is None:
        return None
    env = os.environ if env is None else env
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return None
        gpu = find_gpu(
            pynvml, visible=env.get("CUDA_VISIBLE_DEVICES"), ordinal=ordinal, uuid=uuid, pci_bus_id=pci_bus_id
        )
        if gpu is None:
            return None
        handle = open_handle(pynvml, gpu)
        cuda_int = pynvml.nvmlSystemGetCudaDriverVersion()
        return NvmlGpu(
            name=gpu.name,
            uuid=gpu.uuid,
            driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}",
            sm_clock_mhz=int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            sm_clock_max_mhz=int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            count=int(count),
            pci_bus_id=gpu.pci_bus_id or None,
            nvml_index=gpu.nvml_index,
            mig_uuid=gpu.mig_uuid,
            power_limit_w=_power_limit_w(pynvml, handle),
        )
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _power_limit_w(pynvml: Any, handle: Any) -> float | None:
    """The GPU's enforced power limit in watts (NVML reports milliwatts); None where unsupported."""
    try:
        return float(pynvml.nvmlDeviceGetEnforcedPowerLimit(handle)) / 1000.0
    except pynvml.NVMLError:
        return None


def first_version(*distributions: str) -> str | None:
    """The installed version of the first of `distributions` that is installed (CUDA libraries ship
    as one wheel per CUDA major: nvidia-cudnn-cu12, nvidia-cudnn-cu13, ...)."""
    return next((v for v in map(package_version, distributions) if v is not None), None)


def harness_digest(root: Path) -> str | None:
    """sha256 of the shared measuring code of the checkout at `root` (ci/fingerprint/rules.toml
    [harness]); None when any of it cannot be resolved."""
    from attnwatch.ci.fingerprint.sources import harness_closure
    from attnwatch.ci.fingerprint.variant import digest_of

    try:
        closure = harness_closure(Path(root))
    except (OSError, ValueError, SyntaxError):
        return None
    return None if closure.unknown else digest_of(closure.files)


def torch_device_identity(ordinal: int) -> dict[str, str]:
    """torch's UUID and PCI bus id of CUDA device `ordinal` ({} for what this torch lacks):
    what NVML is asked for, so clocks and identity come from the device that runs the kernels."""
    import torch

    props = torch.cuda.get_device_properties(ordinal)
    found: dict[str, str] = {}
    if getattr(props, "uuid", None) is not None:
        found["uuid"] = str(props.uuid)
    domain, bus, device = (getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if isinstance(domain, int) and isinstance(bus, int) and isinstance(device, int):
        found["pci_bus_id"] = pci_from_parts(domain, bus, device)
    return found


def device_properties() -> dict[str, Any]:
    """Compute capability, SM count, L2 bytes, name and identity from torch (creates a CUDA context).

    Returns {} on a machine without CUDA. Called by the measuring child, never the parent.
    """
    if package_version("torch") is None:
        return {}
    import torch

    if not torch.cuda.is_available():
        return {}
    ordinal = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(ordinal)
    return {
        "gpu_name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": int(props.multi_processor_count),
        "l2_bytes": int(props.L2_cache_size),
        "gpu_count": int(torch.cuda.device_count()),
        "cuda_ordinal": int(ordinal),
        "torch_identity": torch_device_identity(ordinal),
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def declared_pool(env: Mapping[str, str] | None = None) -> str | None:
    """ATTNWATCH_POOL: the pool of interchangeable GPUs this runner belongs to (history.contract.series_key);
    None when the runner declares none (its host is then its pool)."""
    value = (os.environ if env is None else env).get("ATTNWATCH_POOL", "").strip()
    if not value:
        return None
    problem = pool_problem(value)
    if problem:
        raise UserError(f"ATTNWATCH_POOL: {problem}")
    return value


def capture_environment(probe_device: bool = False) -> Environment:
    """The Environment record for a manifest.

    `probe_device=False` (the run's parent) reads the GPU through NVML only, choosing it by
    CUDA_VISIBLE_DEVICES; `True` also asks torch for the device properties, which creates a
    CUDA context, and then reads NVML for the very device torch uses (by UUID). The device kind
    is "cuda" when NVML or torch sees a GPU, else "cpu".
    """
    torch_version, cuda_version = torch_version_info()
    props = device_properties() if probe_device else {}
    identity = props.get("torch_identity") or {}
    gpu = nvml_gpu(
        int(props.get("cuda_ordinal") or 0), uuid=identity.get("uuid"), pci_bus_id=identity.get("pci_bus_id")
    )
    env = Environment(
        device_kind="cuda" if gpu else "cpu",
        hostname=socket.gethostname(),
        os=f"{platform.system()} {platform.release()}",
        python_version=platform.python_version(),
        cpu=_cpu_name(),
        torch_version=torch_version,
        triton_version=package_version("triton"),
        cupy_version=package_version("cupy-cuda13x") or package_version("cupy-cuda12x") or package_version("cupy"),
        nvcc_version=nvcc_version(),
        cuda_version=cuda_version,
        pool=declared_pool(),
        packages=optional_package_versions(),
        cudnn_version=first_version("nvidia-cudnn-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn"),
        cublas_version=first_version("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12"),
    )
    if gpu:
        env.gpu_name = gpu.name
        env.gpu_uuid = gpu.uuid
        env.gpu_count = gpu.count
        env.driver_version = gpu.driver_version
        env.sm_clock_mhz = gpu.sm_clock_mhz
        env.sm_clock_max_mhz = gpu.sm_clock_max_mhz
        env.cuda_version = env.cuda_version or gpu.cuda_driver_version
        env.gpu_pci_bus_id = gpu.pci_bus_id
        env.gpu_index = gpu.nvml_index
        env.gpu_mig_uuid = gpu.mig_uuid
        env.power_limit_w = gpu.power_limit_w
    merge_device_properties(env, props)
    return env


# Fields that name the GPU a run used. The measuring child finds them from torch's own device,
# so where it reports them they replace the parent's CUDA_VISIBLE_DEVICES-based reading.
IDENTITY_FIELDS = ("gpu_uuid", "gpu_pci_bus_id", "gpu_index", "gpu_mig_uuid")


def merge_device_properties(env: Environment, props: dict[str, Any]) -> Environment:
    """Fill the torch-reported device fields into `env` (what the child journalled).

    When the child names a different GPU than `env` (the parent's guess from
    CUDA_VISIBLE_DEVICES, wrong only on hosts mixing GPU models), the child's GPU wins: its
    identity, name and clocks replace the parent's."""
    if not props:
        return env
    env.device_kind = "cuda"
    if props.get("gpu_uuid") and props["gpu_uuid"] != env.gpu_uuid:
        for name in (*IDENTITY_FIELDS, "gpu_name", "sm_clock_mhz", "sm_clock_max_mhz"):
            setattr(env, name, props.get(name))
    env.gpu_name = env.gpu_name or props.get("gpu_name")
    env.compute_capability = props.get("compute_capability")
    env.sm_count = props.get("sm_count")
    env.l2_bytes = props.get("l2_bytes")
    env.gpu_count = max(env.gpu_count, int(props.get("gpu_count") or 0))
    return env
