-- The launch configuration each result's kernel ran with (CaseTiming.kernel_config, bundle
-- case_timing v2) and how it was chosen (kernel_config_source): "table" when recorded per GPU
-- model and problem (kernels/triton/choices.toml), "tuned" when timed in the measuring process
-- (the table had no entry), "fixed" when there was nothing to choose. An autotuner that picks
-- differently in a fresh process moves a series with no code change behind it; with the
-- configuration stored, detection and the dashboard tell that step apart from a code change.
-- NULL: the variant reports no configuration, or the run was recorded before these columns.
-- The views over results select r.*, so they show the new columns without being recreated.
ALTER TABLE results ADD COLUMN kernel_config VARCHAR;
ALTER TABLE results ADD COLUMN kernel_config_source VARCHAR;
