"""Parse what Nsight Compute really prints with `--csv` (`--page raw` or `--page details`).

What real ncu output contains, and how each is handled (H200 recordings in tests/data/ncu):
- `==PROF==`, `==WARNING==`, `==ERROR==` lines before, between and after the CSV: collected as
  notes, never parsed as data;
- a header row starting with "ID"; on `--page raw` a units row right after it (empty "ID");
- thousands separators in numbers ("43,680", "1,980,000"); "n/a" for values it could not read;
- kernel names with long templates, commas and quotes (CSV-quoted);
- the NVTX push/pop range that was open when the kernel ran, e.g.
  `743  "<default domain>:sdpa:none:none:none:none:none:none" `, which attributes kernels to cases;
- under `--print-metric-instances values` (the H200 A/A of 2026-12-05, tests/data/ncu), a cell
  `total (v1; v2; ...)`: the launch resources print `128 (128)`, read as their total, and the
  per-opcode counts print their values WITHOUT the opcode names: the total instruction count is
  still read from `smsp__inst_executed.sum`, the per-opcode breakdown is listed as missing
  (no names are made up for the values).

Values are normalised to base units (ns, byte, hz, ...) whatever `--print-units` was.

What is refused or reported rather than read as fewer kernels:
- a file cut short: text that does not end with a newline (ncu ends every line with one), or
  a header with no kernel rows after it, is an NcuParseError saying it is truncated; so are
  a missing column, a row of the wrong width and a launch ID that is not an integer. These are
  the table's structure, read by history.contract.ncu_csv, which the bundle reader shares: a CSV refused
  here is refused at ingest too. A listed metric's value that is not a number is refused here;
- a raw-page column that looks like a metric (`unit__counter...`) but is neither on the
  metric list nor expected (known_columns.toml) is listed in `ParsedReport.unknown_columns`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from attnwatch.ci.ncu.metrics import known_column_prefixes, metric_specs, optional_metrics
from attnwatch.history.analysis.exact_counters import INSTANCE_SEPARATOR
from attnwatch.history.contract.ncu_csv import DETAILS_COLUMNS, CsvTable, NcuCsvError, read_table

NVTX_COLUMN_PREFIX = "thread Domain:Push/Pop_Range"
_QUOTED = re.compile(r'"([^"]*)"')
# Prefixed units ncu may print when not asked for base units, with the factor to the base.
_UNIT_FACTORS = {
    "ns": ("ns", 1.0),
    "us": ("ns", 1e3),
    "usecond": ("ns", 1e3),
    "ms": ("ns", 1e6),
    "msecond": ("ns", 1e6),
    "s": ("ns", 1e9),
    "second": ("ns", 1e9),
    "nsecond": ("ns", 1.0),
    "byte": ("byte", 1.0),
    "Kbyte": ("byte", 1e3),
    "Mbyte": ("byte", 1e6),
    "Gbyte": ("byte", 1e9),
    "KB": ("byte", 1e3),
    "MB": ("byte", 1e6),
    "GB": ("byte", 1e9),
    "hz": ("hz", 1.0),
    "khz": ("hz", 1e3),
    "Khz": ("hz", 1e3),
    "mhz": ("hz", 1e6),
    "Mhz": ("hz", 1e6),
    "MHz": ("hz", 1e6),
    "ghz": ("hz", 1e9),
    "Ghz": ("hz", 1e9),
    "GHz": ("hz", 1e9),
    "cycle/nsecond": ("hz", 1e9),
    "cycle/usecond": ("hz", 1e6),
    "cycle/second": ("hz", 1.0),
}


# The table's structure (header, truncation, row widths, launch ids) is read by history.contract.ncu_csv,
# which the bundle reader shares: its NcuCsvError is this parser's error.
NcuParseError = NcuCsvError


@dataclass
class ParsedKernel:
    """One profiled kernel launch."""

    launch_id: int
    kernel_name: str
    nvtx_range: str | None
    block_size: str
    grid_size: str
    metrics: dict[str, float] = field(default_factory=dict)  # ncu metric name -> base-unit value
    missing: list[str] = field(default_factory=list)  # listed metrics ncu did not report


@dataclass
class ParsedReport:
    kernels: list[ParsedKernel]
    notes: list[str]  # the ==PROF== / ==WARNING== / ==ERROR== lines
    page: str  # "raw" or "details"
    unknown_columns: list[str] = field(default_factory=list)  # metric-like raw-page columns not read


def parse_number(text: str) -> float | None:
    """'1,980,000' -> 1980000.0; '' or 'n/a' -> None; anything else non-numeric raises ValueError."""
    cleaned = text.strip().replace(",", "")
    if cleaned in ("", "n/a", "N/A", "nan"):
        return None
    return float(cleaned)


# `--print-metric-instances values`: the total, then the instances' values in parentheses.
_VALUES_FORM = re.compile(r"^\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)\s*\([^()]*\)\s*$")


def parse_cell(text: str) -> float | None:
    """A metric's cell: a number (parse_number), or the `total (v1; v2)` form instanced values
    print in, read as its total."""
    matched = _VALUES_FORM.match(text)
    return parse_number(matched.group(1) if matched else text)


def to_base_unit(value: float, unit: str) -> float:
    factor = _UNIT_FACTORS.get(unit.strip())
    return value * factor[1] if factor else value


# One named instance in a `--print-metric-instances details` cell: `LDG: 1,024` or `LDG=1024`.
_INSTANCE = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*[:=]\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)")


def parse_instances(cell: str) -> dict[str, float]:
    """An instanced metric's cell -> instance name -> value (`sass__inst_executed_per_opcode`: opcode
    -> warp instructions executed). ncu prints the aggregate, then each instance as `name: value`,
    separated by ';' (the form is read by its pairs, so the aggregate and the separators may vary).
    A cell that holds numbers but no names (`--print-metric-instances values`) raises ValueError:
    the counts cannot be told apart by opcode."""
    pairs = _INSTANCE.findall(cell)
    if not pairs:
        if any(ch.isdigit() for ch in cell) and cell.strip().lower() not in ("n/a", "nan"):
            raise ValueError("instance values without names (import with --print-metric-instances details)")
        return {}
    out: dict[str, float] = {}
    for name, value in pairs:
        out[name] = out.get(name, 0.0) + float(value.replace(",", ""))
    return out


def nvtx_range_name(cell: str) -> str | None:
    """The innermost NVTX range name in ncu's push/pop column, or None when no range was open.

    A quoted segment is `Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg`; the range
    name is what lies between the domain and the six trailing fields.
    """
    names = []
    for segment in _QUOTED.findall(cell):
        parts = segment.rsplit(":", 6)
        if len(parts) == 7:
            head = parts[0]
            names.append(head.split(":", 1)[1] if ":" in head else head)
    return names[-1] if names else None


def parse_ncu_csv(
    source: str | Path, *, text: str | None = None, requested: frozenset[str] | None = None
) -> ParsedReport:
    """Parse a raw-page or details-page CSV. `source` names the file in errors.

    `requested`: the metrics ncu was asked for (default: the whole list); one of them absent
    from the raw page is a kernel's `missing`, one of the list that was not asked for is not.
    """
    path = str(source)
    if text is None:
        try:
            text = Path(source).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise NcuParseError(path, "file", f"cannot read: {exc}") from exc
    notes, table = read_table(path, text)
    if table.page == "details":
        return ParsedReport(_parse_details(table), notes, "details")
    return ParsedReport(_parse_raw(path, table, requested), notes, "raw", unknown_metric_columns(table.header))


def unknown_metric_columns(header: list[str]) -> list[str]:
    """Raw-page columns named like a metric that neither the metric list nor known_columns.toml expects.

    A listed metric's rollups (`.avg`, `.max`, `.min`, `.sum`, `.pct_of_...`) share its base name.
    """
    bases = {spec.metric.split(".")[0] for spec in metric_specs()}
    known = known_column_prefixes()
    return [name for name in header if "__" in name and not name.startswith(known) and name.split(".")[0] not in bases]


def nvtx_column(header: list[str]) -> int | None:
    return next((i for i, h in enumerate(header) if h.startswith(NVTX_COLUMN_PREFIX)), None)


def _parse_raw(path: str, table: CsvTable, requested: frozenset[str] | None) -> list[ParsedKernel]:
    header, units = table.header, table.units or [""] * len(table.header)
    id_col, name_col = table.column("ID"), table.column("Kernel Name")
    nvtx_col = nvtx_column(header)
    block_col, grid_col = table.column("Block Size"), table.column("Grid Size")
    wanted = {spec.metric for spec in metric_specs()}
    instanced = {spec.metric for spec in metric_specs() if spec.instanced}
    optional = optional_metrics()
    kernels = []
    for index, row in enumerate(table.rows):
        kernel = ParsedKernel(
            launch_id=int(row[id_col]),
            kernel_name=row[name_col],
            nvtx_range=nvtx_range_name(row[nvtx_col]) if nvtx_col is not None else None,
            block_size=row[block_col],
            grid_size=row[grid_col],
        )
        for col, name in enumerate(header):
            if name not in wanted:
                continue
            if name in instanced:
                try:
                    values = parse_instances(row[col])
                except ValueError:
                    values = {}  # the values form: counts without opcode names (module doc)
                kernel.metrics.update({f"{name}{INSTANCE_SEPARATOR}{key}": v for key, v in values.items()})
                if not values:
                    kernel.missing.append(name)
                continue
            try:
                value = parse_cell(row[col])
            except ValueError:
                raise NcuParseError(
                    path, f"{table.place(index)}, column {name}", f"not a number: {row[col]!r}"
                ) from None
            if value is None:
                kernel.missing.append(name)
            else:
                kernel.metrics[name] = to_base_unit(value, units[col] if col < len(units) else "")
        # An optional metric's column absent (ncu printed no per-opcode counts, or the recording
        # predates them) is evidence not available, not a failed case: the exact compare reads
        # such counts only where both sides have them (history.analysis.exact_counters).
        kernel.missing.extend(sorted((wanted if requested is None else requested) - set(header) - optional))
        kernels.append(kernel)
    return kernels


def _parse_details(table: CsvTable) -> list[ParsedKernel]:
    """`--page details`: one row per (kernel, section, metric). Rule rows (no metric) are skipped."""
    header = table.header
    cols = {name: table.column(name) for name in DETAILS_COLUMNS}
    nvtx_col = nvtx_column(header)
    optional = {name: header.index(name) for name in ("Block Size", "Grid Size") if name in header}
    by_details_name = {spec.details: spec.metric for spec in metric_specs() if spec.details}
    # a `--metrics` profile's rows name the metrics themselves (section "Command line profiler metrics")
    by_details_name.update({spec.metric: spec.metric for spec in metric_specs() if not spec.instanced})
    instanced = {spec.metric for spec in metric_specs() if spec.instanced}
    kernels: dict[int, ParsedKernel] = {}
    for row in table.rows:
        launch_id = int(row[cols["ID"]])
        kernel = kernels.get(launch_id)
        if kernel is None:
            extra = {name: row[i] if i < len(row) else "" for name, i in optional.items()}
            kernel = kernels[launch_id] = ParsedKernel(
                launch_id=launch_id,
                kernel_name=row[cols["Kernel Name"]],
                nvtx_range=nvtx_range_name(row[nvtx_col]) if nvtx_col is not None and nvtx_col < len(row) else None,
                block_size=extra.get("Block Size", ""),
                grid_size=extra.get("Grid Size", ""),
            )
        metric_name = row[cols["Metric Name"]]
        if not metric_name:
            continue  # a rule's advice row, not a measurement
        if metric_name in instanced:
            try:
                kernel.metrics.update(
                    {
                        f"{metric_name}{INSTANCE_SEPARATOR}{key}": v
                        for key, v in parse_instances(row[cols["Metric Value"]]).items()
                    }
                )
            except ValueError:
                pass  # the values form: counts without opcode names, so no per-opcode counters (module doc)
            continue
        try:
            value = parse_cell(row[cols["Metric Value"]])
        except ValueError:
            continue  # textual values ("PolicySpread", "all") are descriptions, not metrics
        if value is None:
            continue
        value = to_base_unit(value, row[cols["Metric Unit"]])
        section = row[cols["Section Name"]]
        kernel.metrics[f"details/{section}/{metric_name}"] = value
        if metric_name in by_details_name:
            kernel.metrics[by_details_name[metric_name]] = value
    listed = {spec.metric for spec in metric_specs()} - optional_metrics()  # read where present (_parse_raw)
    for kernel in kernels.values():
        kernel.missing = sorted(listed - set(kernel.metrics))
    return [kernels[k] for k in sorted(kernels)]
