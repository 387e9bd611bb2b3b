"""`attnwatch cache-key`: the toolchain key a workflow puts in its cache key (ci/cache_key.py), so a
new nvcc, Triton, torch, CuPy, driver or Python never restores the caches of the old one; with
--seal and --verify, the manifest of Triton's cache folder (ci/tool_cache_manifest.py) written
before the root is saved and checked after it is restored."""

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
    p.add_argument(
        "--seal",
        action="store_true",
        help="write the manifest of Triton's cache folder (sha256 per file), before the root is saved",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="remove each Triton cache entry the manifest does not vouch for, after the root is restored",
    )
    p.set_defaults(func=_run)


def _run(args) -> int:
    from attnwatch.ci import cache_key

    if args.seal or args.verify:
        from attnwatch.ci import tool_cache_manifest as manifest

        folder = manifest.triton_folder()
        if args.verify:
            notes = manifest.verify(folder)
            print("\n".join(notes) or f"Triton cache {folder}: every entry matches its manifest")
        if args.seal:
            print(f"Triton cache {folder}: manifest of {manifest.seal(folder)} files written")
    elif args.root:
        print(cache_key.cache_root())
    else:
        print(cache_key.describe() if args.json else cache_key.toolchain_key())
    return 0
