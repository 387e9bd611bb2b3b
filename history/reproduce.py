"""The one command that measures a case again: shown beside every result on the dashboard and
every row of the PR comment, so any number can be checked by whoever doubts it.

A case id is variant/shape/dtype/(causal|noncausal); `attnwatch run` and `attnwatch compare`
select exactly that case with --shapes SHAPE_ID --variants V --dtypes D --causal yes|no. A
stored run measured one commit: `git checkout --detach SHA && attnwatch run ...` measures that
commit's code with that commit's settings (ci/run_config.toml travels with it). An A/B names
both commits and the interval method. Every value is shell-quoted (shlex): a case id from an
untrusted bundle cannot become a second command.
"""

from __future__ import annotations

import re
import shlex

_SHA = re.compile(r"^[0-9a-f]{7,64}$")


def _case_flags(case_id: str) -> list[str] | None:
    parts = case_id.split("/")
    if len(parts) != 4 or parts[3] not in ("causal", "noncausal") or not all(parts):
        return None
    variant, shape, dtype, causal = parts
    return ["--shapes", shape, "--variants", variant, "--dtypes", dtype, "--causal", "yes" if causal == "causal" else "no"]


def _command(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def run_command(case_id: str, commit_sha: str | None, device: str | None = None) -> str | None:
    """Measure `case_id` at `commit_sha` again, alone; None when the case id or commit is not one."""
    flags = _case_flags(case_id)
    if flags is None or not commit_sha or not _SHA.match(commit_sha):
        return None
    device_flags = ["--device", device] if device in ("cuda", "cpu") else []
    return f"git checkout --detach {commit_sha} && " + _command(["attnwatch", "run", *flags, *device_flags])


def compare_command(case_id: str, base_sha: str | None, head_sha: str | None, *, method: str | None = None,
                    rounds: int | None = None) -> str | None:
    """A/B `case_id` between two commits again, with the same interval method and round cap."""
    flags = _case_flags(case_id)
    if flags is None or not all(s and _SHA.match(s) for s in (base_sha, head_sha)):
        return None
    extra = (["--method", method] if method else []) + (["--rounds", str(int(rounds))] if rounds else [])
    return _command(["attnwatch", "compare", "--base", base_sha, "--head", head_sha, *flags, *extra])
