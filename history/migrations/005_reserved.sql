-- 005_reserved: a placeholder holding version 5 for issue 16's migration (stored tolerances and
-- violations), which is written on another branch. It changes nothing. When the branches are
-- merged, that migration replaces this file (same version number); no released history ever
-- applies this placeholder.
SELECT 1;
