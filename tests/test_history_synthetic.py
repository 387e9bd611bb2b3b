"""The synthetic history generator: labelled synthetic, realistic shape, planted steps present."""

from __future__ import annotations

from attnwatch.history.store.db import open_read
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
