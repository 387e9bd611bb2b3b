-- 007_default_branch: which branch is the history's mainline, as a setting of the history.
--
-- Until now "main" was written into every query that means "the default branch" (detection,
-- the views below, every dashboard page), so a repository whose default branch is `master` or
-- `trunk` got no series, no alerts and empty pages, silently. The history now records its
-- default branch once, in `history_settings` (name -> value), and everything reads it from
-- there (history.settings.default_branch; docs/design.md, "The default branch"). It is set by
-- `attnwatch ingest --default-branch NAME` (the GPU workflow passes the repository's
-- `default_branch` from the event) or `attnwatch history default-branch NAME`.
-- An existing history keeps what it had: `main`.
CREATE TABLE history_settings (
    name  VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);
INSERT INTO history_settings VALUES ('default_branch', 'main');

-- As in 006, on the recorded default branch instead of 'main' (the views keep their names).
CREATE OR REPLACE VIEW latest_main_runs AS
SELECT * EXCLUDE (rank_in_gpu)
FROM (
    SELECT u.*,
           row_number() OVER (PARTITION BY coalesce(u.gpu_name, u.device_kind), u.pool
                              ORDER BY u.started_at DESC, u.run_id DESC) AS rank_in_gpu
    FROM runs u
    WHERE u.branch = (SELECT value FROM history_settings WHERE name = 'default_branch') AND u.status = 'complete'
)
WHERE rank_in_gpu = 1;

CREATE OR REPLACE VIEW case_series AS
SELECT
    d.*,
    coalesce(d.gpu_name, d.device_kind) AS series_gpu,
    d.pool AS series_pool,
    row_number() OVER (PARTITION BY d.case_id, coalesce(d.gpu_name, d.device_kind), d.pool
                       ORDER BY d.committed_at NULLS LAST, d.started_at, d.run_id) AS series_index
FROM result_details d
WHERE d.branch = (SELECT value FROM history_settings WHERE name = 'default_branch')
  AND d.status = 'ok' AND d.median_us IS NOT NULL;
