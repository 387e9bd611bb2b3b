-- 001_initial: the history's first schema.
--
-- Conventions: tables are plural nouns; units are in column names (_us microseconds,
-- _mhz, _bytes, _pct, _s seconds); every timestamp column (_at) is UTC without a zone.
-- Natural keys make ingest idempotent: the same bundle twice adds nothing.

-- One row per ingested run bundle (or imported pytest-benchmark file).
CREATE TABLE runs (
    run_id                VARCHAR PRIMARY KEY,
    source                VARCHAR NOT NULL,          -- 'bundle' | 'pytest-benchmark'
    repo                  VARCHAR NOT NULL,
    commit_sha            VARCHAR,
    parent_sha            VARCHAR,
    branch                VARCHAR,
    pr_number             INTEGER,
    trigger               VARCHAR NOT NULL,
    started_at            TIMESTAMP NOT NULL,
    finished_at           TIMESTAMP,
    runner                VARCHAR NOT NULL,
    shape_set             VARCHAR NOT NULL,
    status                VARCHAR NOT NULL,          -- 'complete' | 'partial' | 'failed'
    dirty                 BOOLEAN NOT NULL DEFAULT false,
    synthetic             BOOLEAN NOT NULL DEFAULT false,
    notes                 VARCHAR NOT NULL DEFAULT '',
    device_kind           VARCHAR NOT NULL,          -- 'cuda' | 'cpu' | 'host'
    hostname              VARCHAR,
    os                    VARCHAR,
    python_version        VARCHAR,
    cpu                   VARCHAR,
    gpu_name              VARCHAR,
    gpu_uuid              VARCHAR,
    gpu_count             INTEGER,
    compute_capability    VARCHAR,
    sm_count              INTEGER,
    l2_bytes              BIGINT,
    driver_version        VARCHAR,
    cuda_version          VARCHAR,
    sm_clock_mhz          INTEGER,
    sm_clock_max_mhz      INTEGER,
    torch_version         VARCHAR,
    triton_version        VARCHAR,
    cupy_version          VARCHAR,
    nvcc_version          VARCHAR,
    pytest_benchmark_version VARCHAR,
    ncu_version           VARCHAR,
    bundle_schema_version INTEGER,
    content_sha256        VARCHAR NOT NULL,
    ingested_at           TIMESTAMP NOT NULL
);

-- Commits seen in runs; upserted (later runs may know more, e.g. the message).
CREATE TABLE commits (
    sha            VARCHAR PRIMARY KEY,
    parent_sha     VARCHAR,
    message        VARCHAR,
    committed_at   TIMESTAMP,
    branch         VARCHAR,
    repo           VARCHAR
);

-- One row per planned case per run: its outcome and, when timed, its statistics.
CREATE TABLE results (
    run_id                 VARCHAR NOT NULL,
    case_id                VARCHAR NOT NULL,
    variant                VARCHAR NOT NULL,
    shape_id               VARCHAR,
    batch                  INTEGER,
    heads                  INTEGER,
    seq_q                  INTEGER,
    seq_k                  INTEGER,
    head_dim               INTEGER,
    dtype                  VARCHAR,
    causal                 BOOLEAN,
    status                 VARCHAR NOT NULL,         -- ok | failed | crashed | timeout | skipped | unsupported
    error                  VARCHAR,
    duration_s             DOUBLE,                   -- wall time the case took in the harness
    timing_mode            VARCHAR,                  -- cuda_events | cuda_graph | cpu_wall | host
    n_samples              INTEGER,
    median_us              DOUBLE,
    p10_us                 DOUBLE,
    p90_us                 DOUBLE,
    iqr_us                 DOUBLE,
    mean_us                DOUBLE,
    stddev_us              DOUBLE,
    min_us                 DOUBLE,
    max_us                 DOUBLE,
    us_per_head            DOUBLE,
    tflops                 DOUBLE,
    gap_to_sdpa            DOUBLE,                   -- median / median(sdpa), same run, same GPU
    gap_to_fastest_backend DOUBLE,
    fastest_backend        VARCHAR,
    gap_to_backends        MAP(VARCHAR, DOUBLE),     -- sdpa_* backend -> ratio
    graph_median_us        DOUBLE,
    converged              BOOLEAN,
    rel_spread             DOUBLE,                   -- IQR / median
    sm_clock_mhz_before    INTEGER,
    sm_clock_mhz_after     INTEGER,
    throttle_reasons       VARCHAR[],
    throttled_samples      INTEGER,
    interleave_group       VARCHAR,
    benchmark_name         VARCHAR,                  -- pytest-benchmark's name / fullname / group
    benchmark_fullname     VARCHAR,
    benchmark_group        VARCHAR,
    host_rounds            BIGINT,                   -- pytest-benchmark host statistics, seconds -> us
    host_iterations        BIGINT,
    host_median_us         DOUBLE,
    host_mean_us           DOUBLE,
    host_stddev_us         DOUBLE,
    host_min_us            DOUBLE,
    host_max_us            DOUBLE,
    host_iqr_us            DOUBLE,
    host_q1_us             DOUBLE,
    host_q3_us             DOUBLE,
    PRIMARY KEY (run_id, case_id)
);

-- Raw per-call latencies, in the order they were taken. The natural key is
-- (run_id, case_id, sample_index), but no PRIMARY KEY is declared: samples are by far the
-- largest table and a key index doubled ingest time and tripled its size on disk. A run's
-- samples are only ever written in that run's own ingest transaction, and a run is
-- ingested once (runs.run_id), so the key holds without the index.
CREATE TABLE samples (
    run_id        VARCHAR NOT NULL,
    case_id       VARCHAR NOT NULL,
    sample_index  INTEGER NOT NULL,
    latency_us    DOUBLE NOT NULL
);

-- Correctness checks against a high-precision reference, one row per seed.
CREATE TABLE correctness (
    run_id        VARCHAR NOT NULL,
    case_id       VARCHAR NOT NULL,
    seed          BIGINT NOT NULL,
    variant       VARCHAR NOT NULL,
    shape_id      VARCHAR NOT NULL,
    batch         INTEGER NOT NULL,
    heads         INTEGER NOT NULL,
    seq_len       INTEGER NOT NULL,
    head_dim      INTEGER NOT NULL,
    dtype         VARCHAR NOT NULL,
    causal        BOOLEAN NOT NULL,
    max_abs_err   DOUBLE,
    rel_err       DOUBLE,
    atol          DOUBLE NOT NULL,
    rtol          DOUBLE NOT NULL,
    passed        BOOLEAN NOT NULL,
    nonfinite     BIGINT NOT NULL DEFAULT 0,
    error         VARCHAR,
    PRIMARY KEY (run_id, case_id, seed)
);

-- Build reports of compiled variants.
CREATE TABLE builds (
    run_id               VARCHAR NOT NULL,
    variant              VARCHAR NOT NULL,
    ok                   BOOLEAN NOT NULL,
    target               VARCHAR NOT NULL DEFAULT '',
    compile_seconds      DOUBLE,
    registers_per_thread INTEGER,
    shared_mem_bytes     BIGINT,
    spill_store_bytes    BIGINT,
    spill_load_bytes     BIGINT,
    stack_frame_bytes    BIGINT,
    source_hash          VARCHAR,
    cached               BOOLEAN NOT NULL DEFAULT false,
    config               JSON,
    log_tail             VARCHAR NOT NULL DEFAULT '',
    error                VARCHAR,
    PRIMARY KEY (run_id, variant)
);

-- Nsight Compute: one row per profiled kernel launch in a case's range.
CREATE TABLE ncu_kernels (
    run_id        VARCHAR NOT NULL,
    case_id       VARCHAR NOT NULL,
    kernel_index  INTEGER NOT NULL,
    kernel_name   VARCHAR NOT NULL,
    block_size    VARCHAR NOT NULL DEFAULT '',
    grid_size     VARCHAR NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, case_id, kernel_index)
);

-- Nsight Compute metrics, long format: ncu's own metric names, base units.
CREATE TABLE ncu_metrics (
    run_id        VARCHAR NOT NULL,
    case_id       VARCHAR NOT NULL,
    kernel_index  INTEGER NOT NULL,
    kernel_name   VARCHAR NOT NULL,
    metric_name   VARCHAR NOT NULL,
    value         DOUBLE,
    PRIMARY KEY (run_id, case_id, kernel_index, metric_name)
);

-- Nsight Compute per case: durations summed over kernels, percentages duration-weighted.
CREATE TABLE ncu_cases (
    run_id                     VARCHAR NOT NULL,
    case_id                    VARCHAR NOT NULL,
    kernel_count               INTEGER NOT NULL,
    duration_us                DOUBLE,
    sm_throughput_pct          DOUBLE,
    dram_throughput_pct        DOUBLE,
    dram_bytes                 DOUBLE,
    achieved_occupancy_pct     DOUBLE,
    theoretical_occupancy_pct  DOUBLE,
    tensor_pipe_pct            DOUBLE,
    hmma_instructions          DOUBLE,
    gmma_instructions          DOUBLE,
    l2_hit_rate_pct            DOUBLE,
    registers_per_thread       DOUBLE,
    shared_mem_per_block_bytes DOUBLE,
    local_memory_bytes         DOUBLE,
    sm_clock_mhz               DOUBLE,
    achieved_tflops            DOUBLE,
    occupancy_limiter          VARCHAR,
    error                      VARCHAR,
    memory_throughput_pct      DOUBLE,
    dram_bytes_ideal           DOUBLE,                 -- Q, K, V read once + O written once
    arithmetic_intensity       DOUBLE,                 -- case FLOPs / DRAM bytes
    peak_tflops                DOUBLE,                 -- the measured ceiling compared against
    pct_of_peak                DOUBLE,
    PRIMARY KEY (run_id, case_id)
);

-- Regression / improvement / correctness alerts, written by detection.
-- alert_id is local to this database; dedup_key is the natural key across databases.
CREATE SEQUENCE alert_ids START 1;
CREATE TABLE alerts (
    alert_id        BIGINT PRIMARY KEY DEFAULT nextval('alert_ids'),
    dedup_key       VARCHAR NOT NULL UNIQUE,
    kind            VARCHAR NOT NULL CHECK (kind IN ('regression', 'improvement', 'correctness')),
    metric          VARCHAR NOT NULL,
    case_id         VARCHAR NOT NULL,
    gpu_name        VARCHAR,
    run_id          VARCHAR,
    commit_sha      VARCHAR,
    baseline_value  DOUBLE,
    new_value       DOUBLE,
    change_pct      DOUBLE,
    detail          VARCHAR NOT NULL DEFAULT '',
    status          VARCHAR NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'acknowledged', 'resolved')),
    note            VARCHAR NOT NULL DEFAULT '',
    actor           VARCHAR NOT NULL DEFAULT '',
    created_at      TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'),
    updated_at      TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
);

-- Every result joined with its run's environment and commit: the table most questions start from.
CREATE VIEW result_details AS
SELECT
    r.*,
    u.repo, u.commit_sha, u.parent_sha, u.branch, u.pr_number, u.trigger,
    u.started_at, u.finished_at, u.status AS run_status, u.synthetic,
    u.device_kind, u.gpu_name, u.gpu_uuid, u.driver_version, u.cuda_version,
    u.torch_version, u.triton_version, u.cupy_version, u.runner,
    c.committed_at, c.message AS commit_message
FROM results r
JOIN runs u USING (run_id)
LEFT JOIN commits c ON c.sha = u.commit_sha;

-- The latest complete run on main per GPU (by start time).
CREATE VIEW latest_main_runs AS
SELECT * EXCLUDE (rank_in_gpu)
FROM (
    SELECT u.*,
           row_number() OVER (PARTITION BY coalesce(u.gpu_name, u.device_kind)
                              ORDER BY u.started_at DESC, u.run_id DESC) AS rank_in_gpu
    FROM runs u
    WHERE u.branch = 'main' AND u.status = 'complete'
)
WHERE rank_in_gpu = 1;

-- Results of those latest main runs.
CREATE VIEW latest_results AS
SELECT d.*
FROM result_details d
JOIN latest_main_runs l USING (run_id);

-- One series per case_id x GPU on main: ok results in commit order (then start time).
-- series_index numbers the points; detection and the trend charts read this view.
CREATE VIEW case_series AS
SELECT
    d.*,
    coalesce(d.gpu_name, d.device_kind) AS series_gpu,
    row_number() OVER (PARTITION BY d.case_id, coalesce(d.gpu_name, d.device_kind)
                       ORDER BY d.committed_at NULLS LAST, d.started_at, d.run_id) AS series_index
FROM result_details d
WHERE d.branch = 'main' AND d.status = 'ok' AND d.median_us IS NOT NULL;

-- Per run: how many cases ended in each status, for run lists and health checks.
CREATE VIEW run_summaries AS
SELECT
    u.run_id, u.repo, u.commit_sha, u.branch, u.pr_number, u.trigger, u.started_at,
    u.status, u.gpu_name, u.device_kind, u.synthetic,
    count(r.case_id) AS cases,
    count(r.case_id) FILTER (WHERE r.status = 'ok') AS cases_ok,
    count(r.case_id) FILTER (WHERE r.status = 'failed') AS cases_failed,
    count(r.case_id) FILTER (WHERE r.status IN ('crashed', 'timeout')) AS cases_crashed,
    count(r.case_id) FILTER (WHERE r.status IN ('skipped', 'unsupported')) AS cases_skipped
FROM runs u
LEFT JOIN results r USING (run_id)
GROUP BY ALL;

-- Correctness per case per run: worst error over seeds and whether every seed passed.
CREATE VIEW correctness_summaries AS
SELECT
    run_id, case_id, variant, shape_id, dtype, causal,
    count(*) AS seeds,
    bool_and(passed) AS passed,
    max(max_abs_err) AS worst_max_abs_err,
    max(rel_err) AS worst_rel_err,
    sum(nonfinite) AS nonfinite
FROM correctness
GROUP BY ALL;
