-- How each result's samples were taken on a GPU that may run under its power or thermal cap
-- (CaseTiming.timing_recipe and clock summary, bundle case_timing v3; ci/timing/power.py).
-- Long kernels on a power-capped GPU ran with the SM clock moving between samples (issue #31);
-- attnwatch never changes clocks, so a run names its recipe: "plain" (samples as before),
-- "clock" (each sample's SM clock recorded), "paced_*" (an idle gap before each call, its wall
-- time in pacing_gap_s), "band" (samples off the modal clock discarded and counted in
-- band_discarded_samples; the latency statistics are those of the samples kept).
-- clock_normalised_median_us is the median of time x f_sample / reference_clock_mhz: a
-- cycle-space figure stored beside median_us under its own name, never a latency.
-- NULL: not recorded (a run before this column, a CPU run, or a recipe without a clock record).
-- The views over results select r.*, so they show the new columns without being recreated.
ALTER TABLE results ADD COLUMN timing_recipe VARCHAR;
ALTER TABLE results ADD COLUMN sm_clock_median_mhz DOUBLE;
ALTER TABLE results ADD COLUMN sm_clock_min_mhz DOUBLE;
ALTER TABLE results ADD COLUMN sm_clock_max_mhz DOUBLE;
ALTER TABLE results ADD COLUMN reference_clock_mhz DOUBLE;
ALTER TABLE results ADD COLUMN clock_normalised_median_us DOUBLE;
ALTER TABLE results ADD COLUMN pacing_gap_s DOUBLE;
ALTER TABLE results ADD COLUMN band_discarded_samples INTEGER;

-- Each sample's SM clock (MHz), read by the host from NVML while the sample ran, where the
-- recipe recorded clocks (samples.json v2); NULL otherwise.
ALTER TABLE samples ADD COLUMN sm_clock_mhz DOUBLE;
