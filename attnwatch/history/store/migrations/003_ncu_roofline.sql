-- 003_ncu_roofline: every profiled case's roofline inputs in one place, CI's stored values first.
--
-- The five roofline columns of ncu_cases (memory_throughput_pct, dram_bytes_ideal,
-- arithmetic_intensity, peak_tflops, pct_of_peak: NcuCaseMetrics' optional fields) have been in
-- the table since 001, so no column is added here; a bundle written before CI derived them
-- stores NULL there. This view is the one definition of a roofline point, for the Kernel page
-- and for SQL users alike:
--   arithmetic_intensity  FLOP per DRAM byte. CI's stored value where present; otherwise the
--                         case's FLOPs (4*B*H*Sq*Sk*D, halved when causal: DESIGN.md, Metrics)
--                         over ncu's DRAM bytes. intensity_source says which: 'stored' | 'derived'.
--   achieved_tflops       CI's stored value (case FLOPs over ncu's summed kernel duration) where
--                         present; otherwise the same quotient from the stored duration_us.
--                         tflops_source: 'stored' | 'derived'.
--   dram_excess_ratio     ncu DRAM bytes / the ideal (Q, K, V read once, O written once).
--   peak_tflops, pct_of_peak  the measured ceiling CI compared against (history/ceilings.toml
--                         when the run was profiled) and the percentage of it; never recomputed.
CREATE VIEW ncu_roofline AS
WITH cases AS (
    SELECT
        n.*,
        r.variant, r.shape_id, r.dtype, r.causal, r.tflops AS timed_tflops,
        4.0 * r.batch * r.heads * r.seq_q * r.seq_k * r.head_dim / CASE WHEN r.causal THEN 2 ELSE 1 END AS case_flops,
        coalesce(u.gpu_name, u.device_kind) AS gpu, u.branch, u.commit_sha, u.started_at
    FROM ncu_cases n
    JOIN runs u ON u.run_id = n.run_id
    LEFT JOIN results r ON r.run_id = n.run_id AND r.case_id = n.case_id
)
SELECT
    run_id, case_id, variant, shape_id, dtype, causal, gpu, branch, commit_sha, started_at,
    kernel_count, duration_us, case_flops, dram_bytes, dram_bytes_ideal,
    dram_bytes / nullif(dram_bytes_ideal, 0) AS dram_excess_ratio,
    coalesce(arithmetic_intensity, case_flops / nullif(dram_bytes, 0)) AS arithmetic_intensity,
    CASE WHEN arithmetic_intensity IS NOT NULL THEN 'stored'
         WHEN case_flops IS NOT NULL AND dram_bytes > 0 THEN 'derived' END AS intensity_source,
    coalesce(achieved_tflops, case_flops / nullif(duration_us, 0) / 1e6) AS achieved_tflops,
    CASE WHEN achieved_tflops IS NOT NULL THEN 'stored'
         WHEN case_flops IS NOT NULL AND duration_us > 0 THEN 'derived' END AS tflops_source,
    peak_tflops, pct_of_peak, timed_tflops,
    sm_throughput_pct, memory_throughput_pct, dram_throughput_pct, tensor_pipe_pct, error
FROM cases;
