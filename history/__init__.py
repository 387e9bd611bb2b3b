"""The store: DuckDB schema and migrations, bundle validation and ingest, queries, detection.

`history` imports nothing else from this repository (DESIGN.md: kernels <- ci -> history <- app).
"""
