-- The correctness check's margin and error counts (bundle correctness.json v2), which the
-- producer used to drop: a record now also says how much of its allowance the worst element
-- used (tolerance_used = max |out - ref| / (atol + rtol*|ref|), < 1 passes), how many elements
-- broke it (violations) and where the worst one is (worst_index, (b, h, s, d)), with the input
-- profile and the number of calls checked. A kernel drifting towards its tolerance shows up as
-- a trend here before it fails.
-- NULL: not measured (the check failed before an output was compared) or a run recorded before
-- these columns (a v1 bundle). nonfinite may now be NULL for the same first reason.
ALTER TABLE correctness ADD COLUMN profile VARCHAR;
ALTER TABLE correctness ADD COLUMN calls INTEGER;
ALTER TABLE correctness ADD COLUMN tolerance_used DOUBLE;
ALTER TABLE correctness ADD COLUMN violations BIGINT;
ALTER TABLE correctness ADD COLUMN worst_index INTEGER[];
ALTER TABLE correctness ALTER COLUMN nonfinite DROP NOT NULL;

-- Correctness per case per run: worst error and margin over seeds, whether every seed passed.
CREATE OR REPLACE VIEW correctness_summaries AS
SELECT
    run_id, case_id, variant, shape_id, dtype, causal,
    count(*) AS seeds,
    bool_and(passed) AS passed,
    max(max_abs_err) AS worst_max_abs_err,
    max(rel_err) AS worst_rel_err,
    sum(nonfinite) AS nonfinite,
    max(tolerance_used) AS worst_tolerance_used,
    sum(violations) AS violations
FROM correctness
GROUP BY ALL;
