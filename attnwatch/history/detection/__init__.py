"""Regression detection over the main-branch history: change-point scans that open alerts, and
the alerts' life (acknowledged, resolved). The statistics it uses are in history.analysis
(docs/design.md, "Detection")."""
