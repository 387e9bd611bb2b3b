"""Malformed inputs of every kind the issue's operator tried, each as a real broken bundle.

`BAD_INPUTS` lists (name, break, file, field): `break(directory, seed)` writes a bundle (or a
link to one) under `directory` and breaks it, returning the path to give `attnwatch ingest`;
`file` and `field` are what the one-line refusal must name. Used by scripts/fault_check.py's
malformed-input section and its fast part in tests/test_history_faults.py; the in-process
checks of each rule are in tests/test_history_bad_input.py and tests/test_series_identity.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from bundle_factory import case_id, make_bundle

FOREIGN_REPO = "evil/other-repo"
CRASHED_CASE = case_id("sdpa", "l4_mission", "fp16", True)


def _bundle(directory: Path, seed: int, **options) -> Path:
    return make_bundle(directory, run_id=f"bad-{seed}", seed=seed, variants=("sdpa",), n_samples=5, **options)


def _edit(path: Path, edit: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _edited(file: str, edit: Callable[[dict], None], **options) -> Callable[[Path, int], Path]:
    def make(directory: Path, seed: int) -> Path:
        bundle = _bundle(directory, seed, **options)
        _edit(bundle / file, edit)
        return bundle

    return make


def _rewritten(file: str, text: Callable[[str], str]) -> Callable[[Path, int], Path]:
    def make(directory: Path, seed: int) -> Path:
        bundle = _bundle(directory, seed)
        (bundle / file).write_text(text((bundle / file).read_text()))
        return bundle

    return make


def _linked_inside(name: str, target: str) -> Callable[[Path, int], Path]:
    def make(directory: Path, seed: int) -> Path:
        bundle = _bundle(directory, seed)
        (bundle / name).unlink(missing_ok=True)
        (bundle / name).symlink_to(target)
        return bundle

    return make


def _linked_bundle(directory: Path, seed: int) -> Path:
    real = _bundle(directory / "real", seed)
    link = directory / "linked"
    link.symlink_to(real, target_is_directory=True)
    return link


def _variant(name: str) -> Callable[[dict], None]:
    return lambda d: d["timings"][0].update(variant=name)


ATTNWATCH_0 = "timings[0]"
BAD_INPUTS: list[tuple[str, Callable[[Path, int], Path], str, str]] = [
    ("broken JSON", _rewritten("manifest.json", lambda t: '{"run_id": bad, }'), "manifest.json", "json"),
    ("truncated file", _rewritten("benchmark.json", lambda t: t[: len(t) // 2]), "benchmark.json", "json"),
    ("empty file", _rewritten("outcomes.json", lambda t: ""), "outcomes.json", "json"),
    (
        "wrong type: a string for an integer",
        _edited("manifest.json", lambda d: d.update(pr_number="7")),
        "manifest.json",
        "pr_number",
    ),
    (
        "wrong type: a fraction for a count",
        _edited("timings.json", lambda d: d["timings"][1].update(batch=1.5)),
        "timings.json",
        "timings[1].batch",
    ),
    (
        "wrong type: a list for an object",
        _edited("manifest.json", lambda d: d.update(environment=[])),
        "manifest.json",
        "environment",
    ),
    (
        "a negative latency",
        _edited("timings.json", lambda d: d["timings"][0].update(min_us=-1.0)),
        "timings.json",
        f"{ATTNWATCH_0}.min_us",
    ),
    ("a symbolic link for a file", _linked_inside("builds.json", "/etc/passwd"), "builds.json", "file"),
    ("a symbolic link to a directory inside", _linked_inside("extra_dir", "/etc"), "extra_dir", "file"),
    ("a bundle that is a symbolic link", _linked_bundle, "linked", "path"),
    (
        "a foreign repository",
        lambda directory, seed: _bundle(directory, seed, repo=FOREIGN_REPO),
        "manifest.json",
        "repo",
    ),
    (
        "a crashed kernel with a timing",
        _edited(
            "outcomes.json",
            lambda d: next(c for c in d["cases"] if c["case_id"] == CRASHED_CASE).update(
                status="crashed", error="SIGSEGV"
            ),
        ),
        "timings.json",
        "case_id",
    ),
    (
        "a hostile run id (path)",
        _edited("manifest.json", lambda d: d.update(run_id="../../etc/passwd")),
        "manifest.json",
        "run_id",
    ),
    (
        "a hostile name: Cyrillic look-alike",
        _edited("timings.json", _variant("\u0455dpa")),
        "timings.json",
        f"{ATTNWATCH_0}.variant",
    ),
    (
        "a hostile name: fullwidth",
        _edited("timings.json", _variant("\uff53dpa")),
        "timings.json",
        f"{ATTNWATCH_0}.variant",
    ),
    (
        "a hostile name: zero-width space",
        _edited("timings.json", _variant("sdpa\u200b")),
        "timings.json",
        f"{ATTNWATCH_0}.variant",
    ),
    (
        "a hostile name: right-to-left override",
        _edited("timings.json", _variant("sdpa\u202e")),
        "timings.json",
        f"{ATTNWATCH_0}.variant",
    ),
    (
        "a hostile name: SQL in a shape id",
        _edited("outcomes.json", lambda d: d["cases"][0].update(shape_id="x'; DROP TABLE runs; --")),
        "outcomes.json",
        "cases[0].shape_id",
    ),
]


def crashed_bundle(directory: Path, seed: int) -> Path:
    """A well-formed run in which one kernel crashed: its case has no timing (what the harness writes)."""
    return _bundle(directory, seed, statuses={CRASHED_CASE: "crashed"}, run_status="partial")
