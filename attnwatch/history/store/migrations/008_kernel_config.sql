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

-- An alert whose step coincides with a kernel configuration change says which ("m64_n64_w4_s3
-- -> m64_n128_w4_s3": the usual configuration of the runs before and after the step), apart
-- from the commit it names. NULL: no change seen, or an alert from before this column.
ALTER TABLE alerts ADD COLUMN config_change VARCHAR;
