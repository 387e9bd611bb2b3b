"""The bundle contract: what a run's bundle holds, how it is written and validated, and how an
older bundle is upgraded. Pure (no database): GPU runners use it to write what ingest reads."""
