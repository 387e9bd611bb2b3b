-- The outcome of `attnwatch bisect` on an alert (history/detection/bisects.py): the commit of the
-- step's range that made the case slower, found by same-job compares against the good
-- revision, or NULL when the bisect stayed undecided. bisect_result is the one-line outcome
-- people read ("found <sha> <subject>: x1.052 [1.041, 1.063] ..." or "undecided between
-- <sha> and <sha>: <why>"); bisected_at when it was recorded (UTC). A later bisect replaces
-- both. NULL everywhere: never bisected, or an alert from before this migration.
ALTER TABLE alerts ADD COLUMN culprit_sha VARCHAR;
ALTER TABLE alerts ADD COLUMN bisect_result VARCHAR;
ALTER TABLE alerts ADD COLUMN bisected_at TIMESTAMP;
