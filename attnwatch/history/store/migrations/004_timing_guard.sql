-- The timing guard per case (CaseTiming.guard_retimed_blocks / guard_uncovered_blocks).
-- CUDA-event timing enqueues each block of calls behind a guard kernel so that host dispatch
-- never lands inside a sample; a block whose host enqueue outlasted the guard is re-timed with
-- a longer guard, and one still uncovered after the last attempt is kept. A user judging a
-- p90 needs to know whether its samples may contain host gaps, so both counts are stored.
-- NULL: no guard ran (cpu_wall or host timing, or a run recorded before these columns).
-- The views over results select r.*, so they show the new columns without being recreated.
ALTER TABLE results ADD COLUMN guard_retimed_blocks INTEGER;
ALTER TABLE results ADD COLUMN guard_uncovered_blocks INTEGER;
