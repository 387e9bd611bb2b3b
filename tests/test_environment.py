"""Environment capture: git state in a real temporary repository (branch, detached HEAD, dirty,
message), outside any repository, GitHub Actions variables, and a CPU-only machine."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.environment import capture_environment, capture_git, pr_number_from_ref, repo_slug_from_url

CLEAN_ENV: dict[str, str] = {}


def _git(repo, *args):
    subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
            "PATH": "/usr/bin:/bin",
            "HOME": str(repo),
        },
    )


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q", "-b", "trunk")
    (r / "a.txt").write_text("one\n")
    _git(r, "add", "a.txt")
    _git(r, "commit", "-q", "-m", "first commit")
    (r / "a.txt").write_text("two\n")
    _git(r, "commit", "-q", "-am", "second: faster softmax\n\nbody line")
    _git(r, "remote", "add", "origin", "git@github.com:acme/flash-kernels.git")
    return r


def _rev(repo, ref):
    return subprocess.run(
        ["git", "-C", str(repo), "rev-parse", ref], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_git_state_of_a_branch(repo):
    info = capture_git(repo, env=CLEAN_ENV)
    assert info.sha == _rev(repo, "HEAD") and info.parent_sha == _rev(repo, "HEAD^")
    assert info.branch == "trunk" and info.dirty is False
    assert info.message.startswith("second: faster softmax") and "body line" in info.message
    assert info.date and info.date[:4].isdigit()
    assert info.repo == "acme/flash-kernels" and info.pr_number is None


def test_dirty_and_detached_head(repo):
    (repo / "a.txt").write_text("three\n")
    _git(repo, "checkout", "-q", "--detach", "HEAD")
    info = capture_git(repo, env=CLEAN_ENV)
    assert info.dirty is True and info.branch is None and info.sha == _rev(repo, "HEAD")


def test_root_commit_has_no_parent(tmp_path):
    r = tmp_path / "r"
    r.mkdir()
    _git(r, "init", "-q")
    (r / "f").write_text("x")
    _git(r, "add", "f")
    _git(r, "commit", "-q", "-m", "root")
    assert capture_git(r, env=CLEAN_ENV).parent_sha is None


def test_github_actions_variables_win(repo):
    env = {"GITHUB_HEAD_REF": "feature/faster", "GITHUB_REF": "refs/pull/42/merge", "GITHUB_REPOSITORY": "acme/kernels"}
    info = capture_git(repo, env=env)
    assert info.branch == "feature/faster" and info.pr_number == 42 and info.repo == "acme/kernels"


def test_outside_a_repository(tmp_path):
    info = capture_git(tmp_path, env=CLEAN_ENV)
    assert info.sha == "unknown" and info.parent_sha is None and info.branch is None and not info.dirty
    info = capture_git(tmp_path, env={"GITHUB_SHA": "a" * 40, "GITHUB_REF_NAME": "main"})
    assert info.sha == "a" * 40 and info.branch == "main"


@pytest.mark.parametrize(
    "url,slug",
    [
        ("https://github.com/acme/kernels.git", "acme/kernels"),
        ("git@github.com:acme/kernels.git", "acme/kernels"),
        ("https://github.com/acme/kernels", "acme/kernels"),
        ("not a url", None),
    ],
)
def test_repo_slug(url, slug):
    assert repo_slug_from_url(url) == slug


def test_pr_number_only_from_pull_refs():
    assert pr_number_from_ref("refs/pull/7/head") == 7
    assert pr_number_from_ref("refs/heads/main") is None and pr_number_from_ref(None) is None


def test_cpu_only_machine_is_a_valid_environment():
    env = capture_environment(probe_device=True)
    if env.device_kind == "cuda":
        pytest.skip("this machine has a GPU")
    assert env.gpu_name is None and env.sm_count is None and env.gpu_count == 0
    assert env.torch_version and env.python_version and env.hostname


def test_env_command_prints_json(capsys, repo):
    assert main(["env", "--repo", str(repo), "--no-device"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["git"]["branch"] == "trunk"
    assert set(asdict(capture_environment())) == set(data["environment"])


def _dist_info(folder, name: str, version: str) -> None:
    """A package's installed metadata, as pip writes it (pip install --target folder)."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_optional_packages_are_recorded_absent_or_with_their_version(tmp_path, monkeypatch):
    """Every distribution of RECORDED_DISTRIBUTIONS is a key of Environment.packages: None when
    not installed, its version when installed, also in an ATTNWATCH_EXTRA_SITE folder (where a
    GPU runner puts the fa4 extra with pip --target; the run's parent never adds it to its path)."""
    from attnwatch.kernels.optional_packages import OPTIONAL_PACKAGES, RECORDED_DISTRIBUTIONS

    assert {p.distribution for p in OPTIONAL_PACKAGES.values()} <= set(RECORDED_DISTRIBUTIONS)
    monkeypatch.delenv("ATTNWATCH_EXTRA_SITE", raising=False)
    bare = capture_environment().packages
    assert (
        set(bare)
        == set(RECORDED_DISTRIBUTIONS)
        >= {"flash-attn-4", "nvidia-cutlass-dsl", "quack-kernels", "liger-kernel"}
    )
    site = tmp_path / "fa4site"
    _dist_info(site, "flash-attn-4", "4.0.0b4")
    _dist_info(site, "nvidia-cutlass-dsl", "4.3.0")
    monkeypatch.setenv("ATTNWATCH_EXTRA_SITE", str(site))
    packages = capture_environment().packages
    assert packages["flash-attn-4"] == "4.0.0b4" and packages["nvidia-cutlass-dsl"] == "4.3.0"
    assert set(packages) == set(bare)
    if bare["liger-kernel"] is None:
        assert packages["liger-kernel"] is None  # not installed: recorded, as None


def test_a_checkout_without_a_remote_is_named_local_and_its_directory(repo, tmp_path, capsys):
    """Never "" nor a bare "local" two repositories would share: local/<the main checkout's
    directory>, for a git worktree of it too (compare measures the base in one), and what
    `attnwatch env` prints is the same rule's answer."""
    from attnwatch.ci.environment import repository_identity

    _git(repo, "remote", "remove", "origin")
    assert capture_git(repo, env=CLEAN_ENV).repo == repository_identity(repo, CLEAN_ENV) == "local/repo"
    _git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "elsewhere"), "HEAD")
    assert repository_identity(tmp_path / "elsewhere", CLEAN_ENV) == "local/repo"
    outside = tmp_path / "not a repo!"
    outside.mkdir()
    assert repository_identity(outside, CLEAN_ENV) == "local/not-a-repo"
    assert repository_identity(repo, {"ATTNWATCH_REPO": "myteam/kernels"}) == "myteam/kernels"
    assert main(["env", "--repo", str(repo), "--no-device"]) == 0
    assert json.loads(capsys.readouterr().out)["git"]["repo"] == repository_identity(repo)


def test_torch_version_is_read_without_importing_torch():
    """The run's parent records torch's version and CUDA build from torch/version.py, never
    importing torch (about 1.9 s on a 2-core CPU): the same values torch itself reports."""
    probe = (
        "import json, sys\n"
        "from attnwatch.ci.environment import torch_version_info\n"
        "found = torch_version_info()\n"
        "imported = 'torch' in sys.modules\n"
        "import torch\n"
        "print(json.dumps([found, imported, [str(torch.__version__), torch.version.cuda]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    found, imported, asked = json.loads(done.stdout)
    assert not imported and found == asked


@pytest.mark.parametrize(
    "text",
    ["__version__ = compute()\ncuda = None\n", "cuda = '13.0'\n", "__version__ = '2.1'\ncuda = 13\n", "def broken(:\n"],
)
def test_a_torch_version_file_it_cannot_read_literally_says_so(tmp_path, monkeypatch, text):
    """Anything but literal strings (or None for `cuda`) gives None, and the caller imports torch."""
    import importlib.machinery
    import importlib.util

    from attnwatch.ci import environment

    (tmp_path / "version.py").write_text(text)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert environment._torch_version_file() is None
