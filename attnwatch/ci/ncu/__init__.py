"""Nsight Compute: the fixed metric list, a parser for ncu's CSV, per-case aggregation, profiling."""
