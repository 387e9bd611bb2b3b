"""The store: DuckDB schema and migrations, bundle validation and ingest, queries, detection.

`history` imports nothing else from this repository (docs/design.md, "Layers and the direction of imports").
"""
