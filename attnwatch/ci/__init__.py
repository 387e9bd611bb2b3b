"""The per-commit pipeline: suites, timing, ncu, run bundles, compare, PR comments and the CLI.

`ci` may import `kernels` and `history`; `attnwatch/cli/main.py` is the composition root.
"""
