"""Regression detection: thresholds per GPU, A/B verdicts for pull requests, change-point
scans over the main-branch history (docs/design.md, "Detection")."""
