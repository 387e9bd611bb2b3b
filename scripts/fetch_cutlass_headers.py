"""Put the CUTLASS / CuTe headers in `.cutlass/include` (for hosts without the nvidia-cutlass wheel).

Usage:
    python scripts/fetch_cutlass_headers.py [--version 4.2.0.0] [--dest .cutlass/include]
    python scripts/fetch_cutlass_headers.py --from-installed [--only-reachable] [--dest DIR]

The default mode runs `pip download --no-deps nvidia-cutlass[==VERSION]` (pip's ordinary
client, so an index mirror configured for pip is honoured) into a temporary folder and
unpacks only `cutlass_library/source/include/` from the wheel. `--from-installed` copies
the headers of the wheel already installed in this Python instead (no network), and
`--only-reachable` keeps just the headers that the CUTLASS 3-kernel source can include
(quoted and angle-bracket includes, followed transitively): what a GPU runner without network needs to build, carried
along with the checkout. kernels.cutlass.headers finds `.cutlass/include` on its own.
The destination is replaced only after the new copy is complete. Run it with the project's
Python (the one `make install` set up), which imports `kernels`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from attnwatch.kernels.cutlass.headers import REPO_HEADERS, cutlass_include_dir, cutlass_version

WHEEL_INCLUDE_PREFIX = "cutlass_library/source/include/"


def download_wheel(version: str | None, into: Path) -> Path:
    """The nvidia-cutlass wheel, fetched with pip into `into`; SystemExit with pip's output on failure."""
    requirement = f"nvidia-cutlass=={version}" if version else "nvidia-cutlass"
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(into),
        requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(into.glob("nvidia_cutlass-*.whl"))
    if done.returncode != 0 or not wheels:
        raise SystemExit(f"pip download {requirement} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    return wheels[0]


def unpack_include(wheel: Path, staging: Path) -> int:
    """Extract the wheel's include folder into `staging`; returns the number of files."""
    count = 0
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.is_dir() or not member.filename.startswith(WHEEL_INCLUDE_PREFIX):
                continue
            relative = Path(member.filename[len(WHEEL_INCLUDE_PREFIX) :])
            if relative.is_absolute() or ".." in relative.parts:
                raise SystemExit(f"{wheel.name}: refusing unsafe member path {member.filename!r}")
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += 1
    if count == 0:
        raise SystemExit(f"{wheel.name}: no files under {WHEEL_INCLUDE_PREFIX}")
    return count


_ANY_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def reachable_headers(source: Path, include_dir: Path) -> list[Path]:
    """Every header under `include_dir` that `source` can include, transitively, through
    quoted or angle-bracket includes (a superset of what any preprocessor branch needs)."""
    root = include_dir.resolve()
    found: set[Path] = set()
    stack = [source.resolve()]
    while stack:
        current = stack.pop()
        for name in _ANY_INCLUDE_RE.findall(current.read_text(errors="replace")):
            for base in (current.parent, root):
                candidate = (base / name).resolve()
                if candidate.is_file() and candidate.is_relative_to(root):
                    if candidate not in found:
                        found.add(candidate)
                        stack.append(candidate)
                    break
    return sorted(found)


def copy_installed(staging: Path, only_reachable: bool) -> int:
    """Copy the installed headers (all, or those reachable from attention_3k.cu) into `staging`."""
    source = cutlass_include_dir()
    if source is None:
        raise SystemExit("no installed CUTLASS headers to copy (pip install nvidia-cutlass first)")
    base = source.resolve()
    if only_reachable:
        from attnwatch.kernels.cutlass.build import SOURCE

        files = reachable_headers(SOURCE, base)
        files.append(base / "cutlass" / "version.h")
    else:
        files = [p for p in base.rglob("*") if p.is_file()]
    for path in sorted(set(files)):
        target = staging / path.relative_to(base)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return len(set(files))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="nvidia-cutlass wheel version (default: the newest)")
    parser.add_argument(
        "--dest", type=Path, default=REPO_HEADERS, help=f"include folder to fill (default {REPO_HEADERS})"
    )
    parser.add_argument("--from-installed", action="store_true", help="copy the installed wheel's headers (no network)")
    parser.add_argument(
        "--only-reachable", action="store_true", help="with --from-installed: only headers the source can include"
    )
    args = parser.parse_args(argv)
    if args.only_reachable and not args.from_installed:
        parser.error("--only-reachable needs --from-installed")

    args.dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dest.parent, prefix=".fetch-") as scratch:
        staging = Path(scratch) / "include"
        staging.mkdir()
        if args.from_installed:
            count = copy_installed(staging, args.only_reachable)
        else:
            count = unpack_include(download_wheel(args.version, Path(scratch)), staging)
        version = cutlass_version(staging)
        if args.dest.exists():
            shutil.rmtree(args.dest)
        staging.rename(args.dest)
    print(f"CUTLASS {version}: {count} header files in {args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
