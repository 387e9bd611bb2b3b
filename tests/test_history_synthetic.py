"""The synthetic history generator: labelled synthetic, realistic shape, planted steps present."""

from __future__ import annotations

from attnwatch.history.store.db import open_read, open_write
from attnwatch.scripts.make_synthetic_history import main as make_synthetic
from attnwatch.history.store.location import parse_location


def test_synthetic_history_is_labelled_and_has_planted_steps(db_path, capsys):
    assert make_synthetic(["--rows", "30000", "--db", str(db_path)]) == 0
    assert "(synthetic)" in capsys.readouterr().out
    with open_read(parse_location(db_path)) as con:
        runs, synthetic, labelled = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE synthetic), count(*) FILTER (WHERE notes LIKE '%synthetic%') FROM runs"
        ).fetchone()
        results = con.execute("SELECT count(*) FROM results").fetchone()[0]
        statuses = dict(con.execute("SELECT status, count(*) FROM results GROUP BY status").fetchall())
        # The planted triton_fa2 step (+8% from 60% of the commits on the first GPU):
        before, after = con.execute(
            """
            WITH s AS (SELECT series_index, median_us, max(series_index) OVER () AS n FROM case_series
                       WHERE case_id = 'triton_fa2/b4_h16_s2k/fp16/noncausal' AND gpu_name = 'NVIDIA H200')
            SELECT median(median_us) FILTER (WHERE series_index <= 0.5 * n),
                   median(median_us) FILTER (WHERE series_index > 0.7 * n) FROM s
            """
        ).fetchone()
        ncu = con.execute("SELECT count(*) FROM ncu_cases").fetchone()[0]
        gap = con.execute("SELECT max(abs(gap_to_baseline - 1)) FROM results WHERE variant = 'sdpa'").fetchone()[0]
    assert runs == synthetic == labelled > 0
    assert 30000 <= results < 30000 + 240
    assert statuses["ok"] > 0.9 * results and statuses.get("crashed", 0) > 0 and statuses["unsupported"] > 0
    assert 1.05 < after / before < 1.11
    assert ncu > 0 and gap < 1e-9


def test_dashboard_benchmark_gives_two_runs_samples_for_compare(db_path, tmp_path):
    """scripts/bench_dashboard.py --compare-samples: on a copy, each of the two newest main runs of
    the most-run GPU that had no samples gets N per measured case (the samples table's other columns
    left empty); a run that had samples keeps them, and the history it copied keeps none for it."""
    from attnwatch.scripts.bench_dashboard import add_samples

    assert make_synthetic(["--rows", "3000", "--db", str(db_path)]) == 0
    base, head, _ = add_samples(db_path, tmp_path / "first.duckdb", 7)  # which two runs it picks
    with open_write(parse_location(db_path)) as con:  # the generator samples its newest runs: one without
        con.execute("DELETE FROM samples WHERE run_id = ?", [base])

    def per_run(path, runs) -> dict[str, tuple[int, int, int]]:
        """run -> (samples, samples with a clock, measured cases)"""
        with open_read(parse_location(path)) as con:
            return {
                run: con.execute(
                    """SELECT (SELECT count(*) FROM samples WHERE run_id = $r),
                              (SELECT count(sm_clock_mhz) FROM samples WHERE run_id = $r),
                              (SELECT count(DISTINCT case_id) FROM results WHERE run_id = $r AND median_us IS NOT NULL)""",
                    {"r": run},
                ).fetchone()
                for run in runs
            }

    copy = tmp_path / "with_samples.duckdb"
    assert add_samples(db_path, copy, 7)[:2] == (base, head)
    before, after = per_run(db_path, (base, head)), per_run(copy, (base, head))
    assert base != head and after[head][2] > 0
    for run in (base, head):
        samples, clocks, measured = before[run]
        assert after[run] == ((samples, clocks, measured) if samples else (7 * measured, 0, measured))
    assert before[base][0] == 0 < before[head][0]  # read from the original after the copy was filled
