"""docs/design.md is in the repository and every citation of it names one of its sections."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
CITATION = re.compile(r'docs/design\.md,?\s+"([^"]+)"')  # a citation may wrap across lines
# A shipped migration is never edited (its checksum is recorded in every history), so this
# one keeps its comment naming the design document of its day.
FROZEN = {"history/store/migrations/003_ncu_roofline.sql"}


def _headings() -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", DESIGN.read_text(encoding="utf-8"), re.MULTILINE)}


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / n for n in names if n.endswith((".py", ".md", ".toml", ".sql", ".yml", ".cu", ".cuh", ".txt"))
            or n in ("Makefile",)]


def test_design_doc_has_the_sections_the_project_relies_on():
    headings = _headings()
    assert {"Layers and the direction of imports", "Data flow", "Run bundle", "Measurement recipe",
            "Detection", "Security rules", "Fleet history", "Threat model"} <= headings


def test_every_citation_names_an_existing_section():
    headings = _headings()
    cited = {}
    for path in _tracked_text_files():
        for section in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(" ".join(section.split()), []).append(str(path.relative_to(ROOT)))
    assert len(cited) >= 6
    assert {s: files for s, files in cited.items() if s not in headings} == {}


def test_no_file_points_to_a_design_document_that_is_not_in_the_repository():
    stale = [str(p.relative_to(ROOT)) for p in _tracked_text_files()
             if "DESIGN.md" in p.read_text(encoding="utf-8", errors="replace")
             and str(p.relative_to(ROOT)) not in FROZEN and p != Path(__file__).resolve()]
    assert stale == []
