-- The versions of the optional packages a run's variants import (bundle format 3,
-- Environment.packages; the list is kernels/optional_packages.py RECORDED_DISTRIBUTIONS):
-- flash-attn-4, nvidia-cutlass-dsl, quack-kernels, liger-kernel. A JSON object, distribution ->
-- version, with null for a package that was not installed, its keys sorted (history.ingest.rows).
-- NULL: not recorded (a bundle of an older format).
-- series_runs and the views over it select u.*, so they show the column without being recreated.
ALTER TABLE runs ADD COLUMN packages VARCHAR;
