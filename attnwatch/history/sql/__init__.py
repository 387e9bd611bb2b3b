"""The read-only SQL console's engine: the gate, the sandboxed worker, streaming and limits."""
