"""The subjects: attention forward variants, their registry and the named shapes.

`kernels` imports nothing else from this repository (DESIGN.md: kernels <- ci -> history <- app).
"""
