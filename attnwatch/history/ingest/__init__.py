"""Ingest: a validated bundle into the store's rows, once per run id."""
