"""The on-disk compile cache: one directory per trust level, every entry checked before use.

Why it exists apart from the compiler: a compiled binary is code that a later job loads (a
cubin runs on the GPU, a shared library is dlopen'ed). When pull-request jobs (code nobody has
reviewed yet) and main jobs (whose numbers go into the history) shared one cache, a PR could
plant a binary under the key of an unchanged kernel and the next main run would load it on a
key match alone. So (docs/design.md, "Threat model"):

- **One directory per trust level.** `$ATTNWATCH_TRUST` is `trusted` (jobs on the default
  branch, on the trusted runner), `untrusted` (pull-request jobs) or, unset, `local` (a
  developer's machine). The default directory is `<root>/<kind>/<trust>` under the one cache
  root (`cache_root`: `$ATTNWATCH_CACHE`, else `$XDG_CACHE_HOME/attnwatch`, else
  `~/.cache/attnwatch`), which also holds Triton's and CuPy's caches for the measuring children
  (`tool_cache_env`) and the float64 references (kernels.reference_cache). The name alone protects nothing (a PR job can set the
  variable); what protects the trusted directory is that the untrusted OS user cannot write it
  (README, "GPU runners"), and the next rule checks that this holds.
- **Private or refused.** The cache directory must belong to the user running the build and be
  writable by nobody else (the check sshd's StrictModes makes for `~/.ssh`); otherwise
  UnsafeCacheError names the directory and the fix. An entry whose files belong to another
  user or are group/world-writable is not used.
- **Verified before loading.** Each entry's metadata records the sha256 of the binary when it
  was written; a lookup recomputes it, and an entry that does not match (tampered, truncated,
  or written by an older attnwatch without a digest) is a miss, rebuilt and replaced. The
  digest is checked against metadata in the same private directory: it catches any change to
  the binary made after it was written, and the ownership rule above is what keeps another
  user from rewriting both.

Writes are staged in a temporary directory inside the cache and renamed into place (metadata
first), so parallel builds of one key never expose a half-written binary.

The other caches of computed results keep their entries here the same way, each in its own
folder under the root (`open_cache`): bytes stored with the fields of their key (`store_bytes`)
and read back only when the digest matches and the metadata repeats the key asked for
(`read_keyed`): kernels.reference_cache, ci.ncu.profile_cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

TRUST_VARIABLE = "ATTNWATCH_TRUST"
ROOT_VARIABLE = "ATTNWATCH_CACHE"
# The compilers' own cache variables, pointed into the root (`tool_cache_env`), one folder each.
TOOL_CACHE_VARIABLES = {"TRITON_CACHE_DIR": "triton", "CUPY_CACHE_DIR": "cupy"}
TRUST_LEVELS = ("trusted", "untrusted", "local")
DIGEST_FIELD = "sha256"
_CHUNK = 1 << 20


class UnsafeCacheError(RuntimeError):
    """The cache directory could be written by another user: nothing in it can be trusted."""


class CacheEntryWarning(UserWarning):
    """A cache entry was ignored (wrong owner, writable by others, or its digest did not match)."""


@dataclass(frozen=True)
class CacheEntry:
    """A verified hit: the binary and the metadata stored with it."""

    binary: Path
    meta: dict[str, Any]


def trust_level(env: Mapping[str, str] | None = None) -> str:
    """`$ATTNWATCH_TRUST` (trusted, untrusted), `local` when unset; anything else is refused."""
    value = (os.environ if env is None else env).get(TRUST_VARIABLE, "").strip() or "local"
    if value not in TRUST_LEVELS:
        raise ValueError(f"{TRUST_VARIABLE}={value!r}: expected one of {', '.join(TRUST_LEVELS)}")
    return value


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """The one folder every attnwatch cache lives under: `$ATTNWATCH_CACHE`, else
    `$XDG_CACHE_HOME/attnwatch`, else `~/.cache/attnwatch` (what a workflow saves and restores)."""
    env = os.environ if env is None else env
    root = env.get(ROOT_VARIABLE, "").strip()
    if root:
        return Path(root)
    xdg = env.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "attnwatch"


def default_cache_dir(kind: str, env: Mapping[str, str] | None = None) -> Path:
    """`<cache_root>/<kind>/<trust>`: with ATTNWATCH_CACHE set, `$ATTNWATCH_CACHE/<kind>/<trust>`."""
    env = os.environ if env is None else env
    return cache_root(env) / kind / trust_level(env)


def tool_cache_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """TRITON_CACHE_DIR and CUPY_CACHE_DIR under the cache root, per trust level (`<root>/triton/<trust>`),
    for a measuring child: so one saved root carries every compiler's cache. A variable already set
    is kept (someone chose that folder)."""
    env = os.environ if env is None else env
    return {
        name: str(default_cache_dir(kind, env))
        for name, kind in TOOL_CACHE_VARIABLES.items()
        if not env.get(name, "").strip()
    }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _foreign_or_shared(st: os.stat_result) -> str | None:
    """Why a file or directory with this stat is not private to us, or None when it is."""
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
    if who:
        return f"writable by {' and '.join(who)} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def open_cache(kind: str, directory: Path | None = None, what: str = "the cache") -> "CompileCache | None":
    """The private, verified cache of `kind` (default folder: `default_cache_dir(kind)`), or None with
    a CacheEntryWarning naming `what` when it cannot be used (a directory others can write, a trust
    level not known, a disk that refuses): a cache that cannot be used costs only the work it saves."""
    try:
        return CompileCache(Path(directory) if directory is not None else default_cache_dir(kind))
    except (UnsafeCacheError, OSError, ValueError) as exc:
        warnings.warn(f"{what} is not used: {exc}", CacheEntryWarning, stacklevel=3)
        return None


class CompileCache:
    """A private, verified cache directory of compiled binaries keyed by content hash."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = self.root.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeCacheError(f"{self.root}: the compile cache is a symlink; use a real directory")
        problem = _foreign_or_shared(st)
        if problem:
            raise UnsafeCacheError(
                f"{self.root}: the compile cache is {problem}: another user could plant binaries in it. "
                f"Give each trust level its own directory (chmod 700, owned by the user that builds) "
                f"or point {ROOT_VARIABLE} elsewhere"
            )

    def paths(self, key: str, suffix: str) -> tuple[Path, Path]:
        """(binary, metadata) file paths of one key."""
        return self.root / f"{key}{suffix}", self.root / f"{key}.json"

    def lookup(self, key: str, suffix: str) -> CacheEntry | None:
        """The verified entry for `key`, or None (a miss, also for an entry that fails a check)."""
        checked = self._checked_meta(key, suffix)
        if checked is None:
            return None
        binary, meta, recorded = checked
        if not self._digest_matches(binary, sha256_file(binary), recorded):
            return None
        return CacheEntry(binary, meta)

    def read(self, key: str, suffix: str) -> tuple[bytes, dict[str, Any]] | None:
        """The entry's bytes and metadata, the digest checked on exactly the bytes returned (no
        second read that could differ from the checked one); None on a miss or a failed check."""
        checked = self._checked_meta(key, suffix)
        if checked is None:
            return None
        binary, meta, recorded = checked
        try:
            data = binary.read_bytes()
        except OSError:
            return None
        if not self._digest_matches(binary, hashlib.sha256(data).hexdigest(), recorded):
            return None
        return data, meta

    def read_keyed(self, key: str, suffix: str, fields: Mapping[str, Any]) -> tuple[bytes, dict[str, Any]] | None:
        """`read` of an entry stored with `store_bytes` under `fields`: its metadata must repeat them
        as its "key", so a verified entry copied under another key's file name is a miss (warned)."""
        found = self.read(key, suffix)
        if found is None:
            return None
        if found[1].get("key") != fields:
            warnings.warn(
                f"{self.paths(key, suffix)[0]}: ignored, its metadata names another key",
                CacheEntryWarning,
                stacklevel=3,
            )
            return None
        return found

    def _checked_meta(self, key: str, suffix: str) -> tuple[Path, dict[str, Any], str] | None:
        """(binary path, metadata, recorded digest) of an entry both of whose files are private to us."""
        binary, meta_path = self.paths(key, suffix)
        try:
            stats = [binary.stat(follow_symlinks=False), meta_path.stat(follow_symlinks=False)]
        except FileNotFoundError:
            return None
        for path, st in zip((binary, meta_path), stats):
            problem = "a symlink" if stat.S_ISLNK(st.st_mode) else _foreign_or_shared(st)
            if problem:
                warnings.warn(
                    f"{path}: ignored, the cache entry is {problem}; rebuilding", CacheEntryWarning, stacklevel=3
                )
                return None
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError, RecursionError):  # RecursionError: nested past the parser's stack
            return None  # a metadata file we cannot read is a miss; the rebuild replaces it
        recorded = meta.get(DIGEST_FIELD) if isinstance(meta, dict) else None
        if not isinstance(recorded, str):
            return None  # written before entries carried a digest: rebuild once
        return binary, meta, recorded

    @staticmethod
    def _digest_matches(binary: Path, actual: str, recorded: str) -> bool:
        if actual == recorded:
            return True
        warnings.warn(
            f"{binary}: ignored, its sha256 {actual[:12]} is not the {recorded[:12]} recorded when it "
            "was built (changed after it was written, or two builds raced); rebuilding",
            CacheEntryWarning,
            stacklevel=3,
        )
        return False

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A scratch directory inside the cache (same filesystem, so the final rename is atomic)."""
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".build-") as scratch:
            yield Path(scratch)

    def store(self, key: str, suffix: str, staged: Path, meta: Mapping[str, Any]) -> Path:
        """Move a built binary from the staging directory into place, its digest in the metadata."""
        binary, meta_path = self.paths(key, suffix)
        record = {**meta, DIGEST_FIELD: sha256_file(staged)}
        meta_tmp = Path(staged).with_name(f"{key}.json.tmp")
        meta_tmp.write_text(json.dumps(record))
        os.replace(meta_tmp, meta_path)  # metadata first: a visible binary always has its digest
        os.replace(staged, binary)
        return binary

    def store_bytes(self, key: str, suffix: str, data: bytes, fields: Mapping[str, Any], **meta: Any) -> bool:
        """Stage `data` and `store` it with `fields` as its metadata's "key" (read back by
        `read_keyed`) and `meta` beside them; a disk that refuses costs the entry, with a warning."""
        try:
            with self.staging() as scratch:
                staged = scratch / f"{key}{suffix}"
                staged.write_bytes(data)
                self.store(key, suffix, staged, {"key": dict(fields), **meta})
        except OSError as exc:
            warnings.warn(f"{self.root}: entry {key} was not stored ({exc})", CacheEntryWarning, stacklevel=3)
            return False
        return True
