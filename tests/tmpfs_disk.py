"""A real full disk for one `attnwatch` process: its history on a small tmpfs, filled to the byte.

A file-size limit (fault_env.file_size_limit) refuses a write with EFBIG; this refuses it the way
a full disk does, with ENOSPC from the file system, including the write-ahead log and DuckDB's
own temporary files. It needs root (mounting tmpfs); `tmpfs_unavailable()` says when it cannot.

`on_full_tmpfs(db, free, *args)` runs this module as a script in a private mount namespace (the
mount is the child's alone: nothing leaks to the machine and nothing needs cleaning up if the
child is killed). The script, in that namespace:
  1. reads the files already in the history's directory (a history seeded by the caller);
  2. mounts a tmpfs of `size` bytes over that directory and writes them back;
  3. fills the tmpfs with a filler file until only `free` bytes are left;
  4. runs `attnwatch --db DB ARGS...` (its output passed through), then deletes the filler;
  5. reads what the directory then holds, unmounts the tmpfs and writes it in place on the real
     disk: the disk "given more room", where the caller inspects and writes it again.
Its exit status is the CLI's; 97 when the tmpfs itself could not be set up (stderr says why).

    python tests/tmpfs_disk.py DIRECTORY SIZE FREE attnwatch-arguments...
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fault_env import _CLONE_NEWNS, _MS_PRIVATE, _MS_REC, _libc_call, child_env

SIZE = 24 * 1024 * 1024  # as the operator mounted it
FILLER = ".filler"
SETUP_FAILED = 97
_MNT_DETACH = 2


def on_full_tmpfs(
    db: Path, free: int, *args: str, size: int = SIZE, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`attnwatch --db DB ARGS...` with DB's directory a `size`-byte tmpfs holding `free` bytes free."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(db.parent), str(size), str(free), "--db", str(db), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode == SETUP_FAILED:
        raise RuntimeError(f"tmpfs trial not set up: {done.stderr.strip()}")
    return done


def tmpfs_unavailable(scratch: Path) -> str | None:
    """Why a private tmpfs cannot be mounted here (not root, no mount namespace), or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (the file-size-limit trials stand in for a full disk)"
    scratch.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(scratch), str(1024 * 1024), "0", "--probe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return None if done.returncode == 0 else f"no private tmpfs here: {done.stderr.strip()[-300:]}"


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and p.name != FILLER}


def _fill(directory: Path, free: int) -> None:
    st = os.statvfs(directory)
    spare = st.f_bavail * st.f_frsize - free
    if spare > 0:
        fd = os.open(directory / FILLER, os.O_CREAT | os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 0, spare)
        finally:
            os.close(fd)


def _main(argv: list[str]) -> int:
    directory, size, free, args = Path(argv[0]), int(argv[1]), int(argv[2]), argv[3:]
    d = str(directory).encode()
    try:
        seed = _files(directory)
        _libc_call("unshare", _CLONE_NEWNS)
        _libc_call("mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        _libc_call("mount", b"attnwatch-full-disk", d, b"tmpfs", 0, f"size={size},mode=0755".encode())
        for name, data in seed.items():
            (directory / name).write_bytes(data)
        _fill(directory, free)
    except OSError as exc:
        print(f"tmpfs_disk: {exc}", file=sys.stderr)
        return SETUP_FAILED
    if args == ["--probe"]:
        return 0
    rc = subprocess.run([sys.executable, "-m", "attnwatch", *args]).returncode
    (directory / FILLER).unlink(missing_ok=True)
    left = _files(directory)
    _libc_call("umount2", d, _MNT_DETACH)
    for stale in _files(directory):
        (directory / stale).unlink()
    for name, data in left.items():
        (directory / name).write_bytes(data)
    return rc


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
