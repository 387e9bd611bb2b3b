-- 012_operators: every result names its operator (kernels/operators.py: attention, RMSNorm, ...),
-- its byte model's figure, and its gaps against the operator's own baseline and references
-- (issue 29). Until now the reference was fixed: `gap_to_sdpa`, taken against sdpa.
--   operator                  what the case computes; every result before this migration was attention
--   bound                     what its roofline plots against: 'compute' (TFLOP/s under the GEMM peak)
--                             or 'memory' (bytes / median under the DRAM bandwidth); attention's is compute
--   bytes                     the fewest DRAM bytes one call moves (the operator's byte model): what a
--                             memory-bound roofline divides by the median. Attention: Q, K, V and O
--                             once, 4*B*H*S*D elements of 2 bytes (fp16, bf16) or 4 (fp32), which is
--                             what the rows before this migration get
--   gap_to_baseline           median / median(baseline_variant), same interleave group (same process,
--                             same GPU); baseline_variant the operator's baseline (attention: sdpa)
--   gap_to_fastest_reference  the gap to the fastest of the operator's references measured in the
--                             group, and fastest_reference which it was
-- The rows before this migration get them from the columns they had: gap_to_sdpa (baseline sdpa),
-- gap_to_fastest_backend and fastest_backend. gap_to_sdpa stays a column, so every stored query and
-- view that reads it still runs: ingest fills it with gap_to_baseline where the baseline is sdpa
-- (NULL for another operator's results). gap_to_fastest_backend and fastest_backend are kept for
-- the rows before this migration and are NULL after it.
-- The views over results select r.*, so they show the new columns without being recreated.
ALTER TABLE results ADD COLUMN operator VARCHAR DEFAULT 'attention';
ALTER TABLE results ADD COLUMN bound VARCHAR;
ALTER TABLE results ADD COLUMN bytes DOUBLE;
ALTER TABLE results ADD COLUMN gap_to_baseline DOUBLE;
ALTER TABLE results ADD COLUMN baseline_variant VARCHAR;
ALTER TABLE results ADD COLUMN gap_to_fastest_reference DOUBLE;
ALTER TABLE results ADD COLUMN fastest_reference VARCHAR;
UPDATE results SET
    operator = 'attention',
    gap_to_baseline = gap_to_sdpa,
    baseline_variant = CASE WHEN gap_to_sdpa IS NOT NULL THEN 'sdpa' END,
    gap_to_fastest_reference = gap_to_fastest_backend,
    fastest_reference = fastest_backend;
-- What a timing record (not a host-only pytest-benchmark entry) would have carried.
UPDATE results SET
    bound = 'compute',
    bytes = 4.0 * batch * heads * seq_q * head_dim * (CASE WHEN dtype = 'fp32' THEN 4 ELSE 2 END)
WHERE timing_mode IS NOT NULL AND timing_mode <> 'host' AND batch IS NOT NULL;

-- Detection's metric is gap_to_baseline now (history/detection/scan.py). An alert stored with the
-- metric gap_to_sdpa was found in the same values (gap_to_baseline = gap_to_sdpa for every row
-- above), so it is renamed: every reader knows one name, and a scan of the same step finds the
-- alert it already opened. dedup_key, an opaque key across databases, keeps its text.
UPDATE alerts SET metric = 'gap_to_baseline' WHERE metric = 'gap_to_sdpa';
