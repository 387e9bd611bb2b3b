-- 010_series_order: one definition of a series' key and of the order of its points, in views
-- that detection, every dashboard page and user SQL read (docs/design.md, "GPU identity and series").
--
-- Until now each reader spelled the rule itself: `coalesce(gpu_name, device_kind)` in some thirty
-- queries, and two orders: `case_series` (detection) put a run whose commit has no recorded time
-- after every other run, the Trends chart put it at its start time, so the chart and the detector
-- could disagree about which point came after which. Now:
--   series_gpu    the GPU model, or the device kind ('cpu', 'host') of a run without a GPU
--   series_pool   the pool (history.series_key): a series is case x series_gpu x series_pool
--   series_at     the commit's time, or the run's start where the commit's time is unknown
--   the order     series_at, then started_at, then run_id (ascending; history.series_key.SERIES_ORDER):
--                 runs of one commit, or of commits with one time, by start; a tie by run id,
--                 so two readers never order one history differently.
-- Alerts carry the key of the series they were found in: the alert's own GPU and pool, else its
-- run's (alerts from before migration 006 have no pool).

-- Every run with its commit and its series key and time.
CREATE VIEW series_runs AS
SELECT
    u.*,
    c.committed_at, c.message AS commit_message,
    coalesce(u.gpu_name, u.device_kind) AS series_gpu,
    u.pool AS series_pool,
    coalesce(c.committed_at, u.started_at) AS series_at
FROM runs u
LEFT JOIN commits c ON c.sha = u.commit_sha;

-- Every alert with the key of its series, and its run's start and commit message.
CREATE VIEW series_alerts AS
SELECT
    a.*,
    coalesce(a.gpu_name, u.series_gpu) AS series_gpu,
    coalesce(a.pool, u.series_pool) AS series_pool,
    u.started_at AS run_started_at, u.commit_message
FROM alerts a
LEFT JOIN series_runs u ON u.run_id = a.run_id;

-- As in 006, plus the series key and time of the result's run.
CREATE OR REPLACE VIEW result_details AS
SELECT
    r.*,
    u.repo, u.commit_sha, u.parent_sha, u.branch, u.pr_number, u.trigger,
    u.started_at, u.finished_at, u.status AS run_status, u.synthetic,
    u.device_kind, u.gpu_name, u.gpu_uuid, u.driver_version, u.cuda_version,
    u.torch_version, u.triton_version, u.cupy_version, u.runner,
    u.committed_at, u.commit_message,
    u.hostname, u.pool, u.gpu_pci_bus_id, u.gpu_index, u.gpu_mig_uuid,
    u.series_gpu, u.series_pool, u.series_at
FROM results r
JOIN series_runs u USING (run_id);

-- As in 007: the newest complete run (by start) on the default branch per GPU model and pool.
CREATE OR REPLACE VIEW latest_main_runs AS
SELECT * EXCLUDE (rank_in_gpu)
FROM (
    SELECT u.*,
           row_number() OVER (PARTITION BY u.series_gpu, u.series_pool
                              ORDER BY u.started_at DESC, u.run_id DESC) AS rank_in_gpu
    FROM series_runs u
    WHERE u.branch = (SELECT value FROM history_settings WHERE name = 'default_branch') AND u.status = 'complete'
)
WHERE rank_in_gpu = 1;

-- One series per case_id x GPU model x pool on the default branch: ok results in series order.
-- series_index numbers the points; detection and the trend charts read this view.
CREATE OR REPLACE VIEW case_series AS
SELECT
    d.*,
    row_number() OVER (PARTITION BY d.case_id, d.series_gpu, d.series_pool
                       ORDER BY d.series_at, d.started_at, d.run_id) AS series_index
FROM result_details d
WHERE d.branch = (SELECT value FROM history_settings WHERE name = 'default_branch')
  AND d.status = 'ok' AND d.median_us IS NOT NULL;
