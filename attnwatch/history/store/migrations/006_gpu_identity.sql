-- 006_gpu_identity: which GPU and which host measured a run, and series keyed by GPU model x pool.
--
-- Until now a run recorded NVML's device 0 whatever GPU it used (a runner pinned to GPU 1 of a
-- 2-GPU host stored GPU 0's UUID and clocks), and series were keyed by GPU model alone, so two
-- hosts of one model interleaved into one noisy series. Now
-- (docs/design.md, "GPU identity and series"):
--   runs.gpu_uuid          (since 001) the UUID of the GPU the run used, found by CUDA_VISIBLE_DEVICES / torch
--   runs.gpu_pci_bus_id    its PCI bus id as NVML prints it, e.g. 00000000:19:00.0
--   runs.gpu_index         NVML's index of that GPU (not CUDA's ordinal)
--   runs.gpu_mig_uuid      the MIG slice, when the run was confined to one
--   runs.pool              the series pool: what the runner declared in ATTNWATCH_POOL, else its
--                          host name (history.series_key). A pool is a set of GPUs of one model
--                          whose runs may form one series.
--   alerts.pool            the pool of the series an alert was found in.
-- Runs recorded before this migration keep NULL identity columns (their UUID may name the
-- wrong GPU of a multi-GPU host) and get their host name as pool, exactly what a new run of that
-- host that declares no pool gets, so an existing history keeps its series unbroken.
ALTER TABLE runs ADD COLUMN gpu_pci_bus_id VARCHAR;
ALTER TABLE runs ADD COLUMN gpu_index INTEGER;
ALTER TABLE runs ADD COLUMN gpu_mig_uuid VARCHAR;
ALTER TABLE runs ADD COLUMN pool VARCHAR;
UPDATE runs SET pool = coalesce(nullif(trim(hostname), ''), nullif(trim(runner), ''), 'unknown-host');

ALTER TABLE alerts ADD COLUMN pool VARCHAR;
UPDATE alerts SET pool = (SELECT u.pool FROM runs u WHERE u.run_id = alerts.run_id);

-- As in 001, plus where the run was measured: host, pool and the GPU's identity.
CREATE OR REPLACE VIEW result_details AS
SELECT
    r.*,
    u.repo, u.commit_sha, u.parent_sha, u.branch, u.pr_number, u.trigger,
    u.started_at, u.finished_at, u.status AS run_status, u.synthetic,
    u.device_kind, u.gpu_name, u.gpu_uuid, u.driver_version, u.cuda_version,
    u.torch_version, u.triton_version, u.cupy_version, u.runner,
    c.committed_at, c.message AS commit_message,
    u.hostname, u.pool, u.gpu_pci_bus_id, u.gpu_index, u.gpu_mig_uuid
FROM results r
JOIN runs u USING (run_id)
LEFT JOIN commits c ON c.sha = u.commit_sha;

-- The latest complete run on main per GPU model and pool (by start time): with two hosts, one
-- row each, not whichever host ran last.
CREATE OR REPLACE VIEW latest_main_runs AS
SELECT * EXCLUDE (rank_in_gpu)
FROM (
    SELECT u.*,
           row_number() OVER (PARTITION BY coalesce(u.gpu_name, u.device_kind), u.pool
                              ORDER BY u.started_at DESC, u.run_id DESC) AS rank_in_gpu
    FROM runs u
    WHERE u.branch = 'main' AND u.status = 'complete'
)
WHERE rank_in_gpu = 1;

-- One series per case_id x GPU model x pool on main: ok results in commit order (then start
-- time). series_pool is the pool; detection and the trend charts read this view.
CREATE OR REPLACE VIEW case_series AS
SELECT
    d.*,
    coalesce(d.gpu_name, d.device_kind) AS series_gpu,
    d.pool AS series_pool,
    row_number() OVER (PARTITION BY d.case_id, coalesce(d.gpu_name, d.device_kind), d.pool
                       ORDER BY d.committed_at NULLS LAST, d.started_at, d.run_id) AS series_index
FROM result_details d
WHERE d.branch = 'main' AND d.status = 'ok' AND d.median_us IS NOT NULL;
