"""The one command that measures a case again: shown beside every result on the dashboard and
every row of the PR comment, so any number can be checked by whoever doubts it.

A case id is variant/shape/dtype/mode (kernels.cases.case_id), whatever its operator.
`attnwatch run` and `attnwatch compare` select exactly that case with --shapes SHAPE_ID
--variants V --dtypes D, and the mode as ci.selection reads it: attention's modes (causal,
noncausal) are chosen by --causal yes|no; every other operator (kernels.operators, e.g.
RMSNorm's one mode `fwd`) is run in each mode it declares, so its case needs no mode flag. That
is exact because each such operator declares one mode; tests/test_reproduce.py plans every
registered operator's cases through the real selection and fails the day one declares two.
This leaf may not import kernels or ci (docs/design.md, layers; history.contract.names, a leaf
too, is the one project module it reads), so the rule is written here once and held to the
registry by that test, not looked up at run time.

A stored run measured one commit: `git checkout --detach SHA && attnwatch run ...` measures that
commit's code with that commit's settings (ci/run_config.toml travels with it); the flags are
ones every revision with that operator reads. An A/B names both commits and the interval
method. Every value is shell-quoted (shlex): a case id from an untrusted bundle cannot become a
second command.

No command (None; the pages and the comment show "—"):
  - a pytest-plugin result (`gpu_benchmark`, operator `callable`: id variant/shape/dtype) or a
    plain pytest-benchmark entry (id: pytest's node id). The history keeps the node id and the
    commit, but not the directory pytest ran in (a node id is relative to that run's rootdir)
    nor the options it ran with (--gpu-benchmark-device, -p, conftest options), and a
    `compare --pytest` report does not keep the suite path or --pytest-args: any command
    written from that would be a guess at what ran, not the one that measures it again.
  - a commit that is not a hexadecimal SHA.

A run of a dirty checkout gets the command with DIRTY_NOTE after it (below).
"""

from __future__ import annotations

import re
import shlex

from attnwatch.history.contract.names import name_problem

_SHA = re.compile(r"^[0-9a-f]{7,64}$")
# A run of a checkout with uncommitted changes (its manifest's `dirty`) measured code that no
# commit holds: checking the commit out measures the commit alone. The command still helps, so
# it is offered with this shell comment, which a shell ignores when the line is pasted.
DIRTY_NOTE = "  # not the code that ran: that run had uncommitted changes on top of its commit"
# The mode flags of `attnwatch run` / `compare` (ci.selection.CAUSAL_MODES): attention's only.
_MODE_FLAGS = {"causal": ["--causal", "yes"], "noncausal": ["--causal", "no"]}


def _case_flags(case_id: str) -> list[str] | None:
    """The selection flags that name exactly `case_id`; None when it is not a case id of an
    operator (module docstring)."""
    parts = case_id.split("/")
    # Each part is a name (history.contract.names); a pytest node id, split at its slashes, is
    # not (its last parts hold `::` or `[`), so it is never taken for a case.
    if len(parts) != 4 or any(name_problem(p) for p in parts):
        return None
    variant, shape, dtype, mode = parts
    return ["--shapes", shape, "--variants", variant, "--dtypes", dtype, *_MODE_FLAGS.get(mode, [])]


def _command(words: list[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def run_command(case_id: str, commit_sha: str | None, device: str | None = None, dirty: bool = False) -> str | None:
    """Measure `case_id` at `commit_sha` again, alone; None when the case id or commit is not one.
    `dirty`: the run measured uncommitted changes, so the command ends with DIRTY_NOTE."""
    flags = _case_flags(case_id)
    if flags is None or not commit_sha or not _SHA.match(commit_sha):
        return None
    device_flags = ["--device", device] if device in ("cuda", "cpu") else []
    command = f"git checkout --detach {commit_sha} && " + _command(["attnwatch", "run", *flags, *device_flags])
    return command + (DIRTY_NOTE if dirty else "")


def compare_command(
    case_id: str,
    base_sha: str | None,
    head_sha: str | None,
    *,
    method: str | None = None,
    rounds: int | None = None,
    dirty: bool = False,
) -> str | None:
    """A/B `case_id` between two commits again, with the same interval method and round cap.
    `dirty`: either run measured uncommitted changes, so the command ends with DIRTY_NOTE."""
    flags = _case_flags(case_id)
    if flags is None or base_sha is None or head_sha is None or not all(_SHA.match(s) for s in (base_sha, head_sha)):
        return None
    extra = (["--method", method] if method else []) + (["--rounds", str(int(rounds))] if rounds else [])
    return _command(["attnwatch", "compare", "--base", base_sha, "--head", head_sha, *flags, *extra]) + (
        DIRTY_NOTE if dirty else ""
    )
