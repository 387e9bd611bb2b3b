-- The sha256 of the binary each result's kernel ran, for a variant that compiles it in the
-- measuring process (CaseTiming.kernel_binary_sha256, bundle case_timing v5: triton_fa2's cubin).
-- Two results with one digest ran the same code whatever their configuration's name says; a
-- series that steps with a new digest and no new commit in the variant's code moved with the
-- compiler or its configuration. nvcc variants' binaries are in builds.json and sass.json
-- (migration 016). NULL: the variant reports none, or the run was recorded before this column.
-- The views over results select r.*, so they show the new column without being recreated.
ALTER TABLE results ADD COLUMN kernel_binary_sha256 VARCHAR;
