"""`attnwatch cache-key`: the toolchain key a workflow puts in its cache key (ci/cache_key.py), so a
new nvcc, Triton, torch, CuPy, driver or Python never restores the caches of the old one."""

from __future__ import annotations


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "cache-key",
        help="print the toolchain key (nvcc, driver, torch, Triton, CuPy, Python) for a cache key",
        description="Print one line: a short digest of the versions of nvcc, the NVIDIA driver, torch, Triton, CuPy "
        "and Python, for the key under which a workflow saves and restores the cache root ($ATTNWATCH_CACHE).",
    )
    p.add_argument("--json", action="store_true", help="print the versions, the key and the cache root as JSON")
    p.add_argument("--root", action="store_true", help="print the cache root instead (the folder to save and restore)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.ci import cache_key

    if args.root:
        print(cache_key.cache_root())
    else:
        print(cache_key.describe() if args.json else cache_key.toolchain_key())
    return 0
