"""The subjects: attention forward variants, their registry and the named shapes.

`kernels` imports nothing else from this repository (docs/design.md, "Layers and the direction of imports").
"""
