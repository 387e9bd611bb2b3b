"""The dashboard's Compare page and a PR comment compute a case's interval with the same code:
given the same recorded H200 noise they report the same bounds, to the last bit.

Two real bundles hold the per-call CUDA-event latencies of tests/data/timing/h200_event_samples.json
(base: the first process, head: the second). The PR-comment path is `attnwatch compare` over the
bundles, its compare.json read back as the comment job reads it; the dashboard path is the same
bundles ingested into a real DuckDB history and the Compare page's data function.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from attnwatch.app.data.compare import compare_runs
from attnwatch.app.data.store import current_source
from bundle_factory import SHAPES, make_bundle
from attnwatch.cli.main import main
from attnwatch.ci.compare.report import load_report
from compare_factory import GPU, SHAPE_OF, fixture_processes
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

DATA_DIR = Path(__file__).resolve().parent / "data"
T0 = datetime(2026, 11, 3, 9, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def recorded_pair(tmp_path_factory):
    """(base bundle, head bundle), one process of recorded H200 samples each."""
    work = tmp_path_factory.mktemp("agreement")
    processes = fixture_processes(DATA_DIR)
    shapes = tuple(s for s in SHAPES if s.id in SHAPE_OF.values())
    variants = tuple(sorted({cid.split("/")[0] for cid in processes["process0"]}))
    bundles = []
    for i, (side, process) in enumerate((("base", "process0"), ("head", "process1"))):
        bundles.append(
            make_bundle(
                work / side,
                run_id=f"h200-{side}",
                variants=variants,
                shapes=shapes,
                causal=(False,),
                recorded=processes[process],
                commit_sha=("a" if side == "base" else "c") * 40,
                started_at=T0 + timedelta(hours=i),
                gpu_name=GPU,
                with_correctness=False,
                with_builds=False,
            )
        )
    return work, bundles


def test_compare_page_and_pr_comment_give_equal_bounds_on_h200_noise(recorded_pair):
    work, (base, head) = recorded_pair
    out = work / "compare-out"
    assert main(["compare", "--base-bundles", str(base), "--head-bundles", str(head), "--out", str(out)]) == 0
    comment = {c.case_id: c for c in load_report(out / "compare.json").cases}

    db = work / "history.duckdb"
    ingest_paths(parse_location(db), [base, head])
    page = compare_runs(current_source(db), "h200-base", "h200-head", GPU).set_index("case_id")

    assert len(comment) == 9 and set(page.index) == set(comment)
    for case_id, c in comment.items():
        row = page.loc[case_id]
        assert (row.ratio_low, row.ratio_high) == (c.low, c.high), case_id
        assert row.verdict == c.verdict, case_id
    # Real process-to-process offsets: the bounds are not all trivially around 1.
    assert any(c.low > 1.0 or c.high < 1.0 for c in comment.values())
