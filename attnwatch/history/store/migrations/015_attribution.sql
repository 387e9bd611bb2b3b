-- What an alert's attribution compares (issue 42; history/analysis/attribution.py).
--
-- Each variant's fingerprint in each run (bundle format 4, Manifest.fingerprints): `digest` over
-- its code, data files, builds, binaries, libraries and settings (ci/fingerprint/variant.py, what
-- the compare selects by), `code_digest` over what its own code decides (files, binaries, build
-- records without the chosen configuration). Two runs of a variant with equal code_digest ran
-- the same code. NULL digests with `unknown` saying why: it could not be fingerprinted. A run of
-- an older bundle format has no rows: its code is unknown, never assumed unchanged.
CREATE TABLE variant_fingerprints (
    run_id      VARCHAR NOT NULL,
    variant     VARCHAR NOT NULL,
    digest      VARCHAR,
    code_digest VARCHAR,
    unknown     VARCHAR,
    PRIMARY KEY (run_id, variant)
);

-- Environment fields of bundle format 4 (NULL: not recorded): the cuDNN and cuBLAS versions, the
-- GPU's enforced power limit (W), the sha256 of the shared measuring code (the harness).
-- series_runs and the views over it select u.*, so they show the columns without being recreated.
ALTER TABLE runs ADD COLUMN cudnn_version VARCHAR;
ALTER TABLE runs ADD COLUMN cublas_version VARCHAR;
ALTER TABLE runs ADD COLUMN power_limit_w DOUBLE;
ALTER TABLE runs ADD COLUMN harness_digest VARCHAR;

-- Every step alert says what moved across its range: "code", "configuration", "environment",
-- "machine", several joined by " + ", "none (noise suspect)", or "unknown (no fingerprints
-- recorded)" for runs from before fingerprints; `attribution_changes` is a JSON list of
-- {"part", "field", "from", "to"} naming each change. NULL: an alert from before this column.
ALTER TABLE alerts ADD COLUMN attribution VARCHAR;
ALTER TABLE alerts ADD COLUMN attribution_changes VARCHAR;
