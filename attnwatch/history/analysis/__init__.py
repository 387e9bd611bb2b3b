"""Pure analysis: medians and intervals, change points, A/B verdicts, thresholds, roofline
ceilings, kernel configurations. No database: the runner, compare and detection share it."""
