"""scripts/demo_history.py, which measured the shipped demo history: its plan is checked before
anything runs, and each step becomes the commit the plan says, in a real scratch clone."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from attnwatch.scripts.demo_history import PlanError, load_plan, main

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "docs" / "data" / "demo" / "plan.toml"


def test_the_shipped_plan_is_valid_and_names_files_that_are_there():
    steps = load_plan(PLAN)
    assert len(steps) == 8
    assert [next(k for k in ("commit", "patch", "empty", "revert") if k in s) for s in steps] == [
        "commit",
        "commit",
        "commit",
        "patch",
        "empty",
        "empty",
        "revert",
        "patch",
    ]
    assert all((PLAN.parent / s["patch"]).is_file() for s in steps if "patch" in s)
    assert "patch" in steps[steps[6]["revert"]]


@pytest.mark.parametrize(
    "text, field",
    [
        ('[[step]]\ncommit = "abc"\n', "step[0].why"),
        ('[[step]]\nempty = true\nwhy = "x"\n', "step[0].message"),
        ('[[step]]\ncommit = "abc"\nempty = true\nwhy = "x"\n', "step[0]: exactly one of"),
        ('[[step]]\ncommit = "abc"\nwhy = "x"\n[[step]]\nrevert = 1\nmessage = "m"\nwhy = "x"\n', "step[1].revert"),
    ],
)
def test_a_bad_plan_is_one_line_naming_the_file_and_the_field(tmp_path, text, field):
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    with pytest.raises(PlanError) as info:
        load_plan(plan)
    assert str(info.value).startswith(f"{plan}: {field}") and "\n" not in str(info.value)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_each_step_becomes_its_commit_on_main_and_is_recorded(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "trunk")
    (repo / "kernel.cu").write_text("int tile = 64;\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (tmp_path / "smaller.patch").write_text(
        "--- a/kernel.cu\n+++ b/kernel.cu\n@@ -1 +1 @@\n-int tile = 64;\n+int tile = 32;\n"
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(f'''
[[step]]
commit = "{base[:7]}"
why = "baseline"
[[step]]
patch = "smaller.patch"
message = "smaller tile"
why = "regresses"
[[step]]
empty = true
message = "nothing"
why = "holds"
measure = false
[[step]]
revert = 1
message = "Revert smaller tile"
why = "improves"
''')
    out, work = tmp_path / "out", tmp_path / "work"
    true = shutil.which("true")
    assert (
        main(
            [
                "--repo",
                str(repo),
                "--plan",
                str(plan),
                "--work",
                str(work),
                "--out",
                str(out),
                "--tar",
                str(tmp_path / "out.tgz"),
                "--python",
                true,
                "--",
                "--shapes",
                "pr",
            ]
        )
        == 0
    )
    log = _git(work, "log", "--format=%s", "main")
    assert log.splitlines() == ["Revert smaller tile", "nothing", "smaller tile", "base"]
    assert (work / "kernel.cu").read_text() == "int tile = 64;\n"
    records = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 4]  # step 3 was not measured
    assert records[0]["commit"] == base and records[1]["parent"] == base
    assert records[1]["command"][:4] == ["python3", "-m", "attnwatch", "run"]
    assert records[1]["command"][-2:] == ["--out", str(out / f"02-{records[1]['commit'][:7]}")]
    assert "--shapes" in records[1]["command"] and all(r["exit_status"] == 0 for r in records)
    assert "+int tile = 32;" in (out / f"02-{records[1]['commit'][:7]}.diff").read_text()
    with tarfile.open(tmp_path / "out.tgz") as tar:
        assert "out/steps.jsonl" in tar.getnames()
