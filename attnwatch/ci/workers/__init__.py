"""Long-lived measuring workers for compare: the wire format, the worker, the parent's handle."""
