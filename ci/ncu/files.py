"""ncu.json and ncu_raw.csv: the one writer for a bundle, an `attnwatch ncu` folder and `add_ncu`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from history.bundle import NCU_FILE, NCU_RAW_FILE, file_envelope
from history.bundle_writer import finite_record, write_bytes_atomic, write_json_atomic


def write_ncu_files(profile: Any, directory: Path) -> dict[str, str]:
    """Write an NcuProfile's records (ncu.json) and its CSV (ncu_raw.csv, when there is any)
    atomically into `directory`; returns role -> file name for a manifest's `files`."""
    directory = Path(directory)
    write_json_atomic(directory / NCU_FILE, file_envelope(
        NCU_FILE,
        ncu_version=profile.ncu_version,
        kernels=profile.kernel_rows,
        cases=[finite_record(asdict(c)) for c in profile.case_metrics],
    ))
    files = {"ncu": NCU_FILE}
    if profile.raw_csv:
        write_bytes_atomic(directory / NCU_RAW_FILE, profile.raw_csv.encode("utf-8"))
        files["ncu_raw"] = NCU_RAW_FILE
    return files
