"""A fresh clone is enough to run the tests: the recorded data is in tests/data, each file is
described in its README, and nothing the tests, the Makefile or CI run reaches for a folder
beside the checkout."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"

# Ways a file can reach outside the checkout: a sibling folder, or a parent of the root.
OUTSIDE = re.compile(
    r"\.\./shared|shared/fixtures|ATTNWATCH_SHARED|ROOT\.parent\b|"
    r"parent\.parent\.parent|\"\.\.\", \"shared\""
)


def test_every_recorded_file_is_described_and_every_described_file_is_there():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.MULTILINE))
    files = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file() and p.name != "README.md"}
    in_folders = {name for name in named if name.endswith("/")}
    undescribed = {f for f in files if f not in named and not any(f.startswith(d) for d in in_folders)}
    assert undescribed == set(), "add a row to tests/data/README.md for each"
    missing = {name for name in named - in_folders if not (DATA / name).is_file()}
    assert missing == set()
    assert {"timing/h200_event_samples.json", "ncu/h200_raw_sdpa_flash_3op.csv"} <= files


def test_the_fixture_folder_is_inside_the_checkout(fixtures_dir):
    assert fixtures_dir.resolve() == DATA.resolve()
    assert (fixtures_dir / "timing" / "h200_event_samples.json").is_file()


def test_nothing_that_runs_the_tests_reads_beside_the_checkout():
    sources = [
        *ROOT.joinpath("tests").rglob("*.py"),
        ROOT / "Makefile",
        ROOT / ".ci" / "run",
        *ROOT.joinpath(".github", "workflows").glob("*.yml"),
        *ROOT.joinpath("scripts").glob("*.py"),
    ]
    this = Path(__file__).resolve()
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sources
        if path.resolve() != this
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == []
