"""Our FA-paper-grid TFLOPS against a published table (issue 31: "still within 10%").

The table is docs/data/published_fa3_h100.toml (the FlashAttention-3 paper's Figure 5: FA2,
Triton, cuDNN and FA3 forward TFLOPS on an H100 80GB SXM5, 2024), each implementation mapped
to one of our variants. Ours come from `scripts/power_check.py` JSON files (per recipe, per
case: the median over its fresh processes of the per-process medians) and/or `attnwatch run`
bundle directories or their .tgz (read with history.contract's one reader, one process). Our TFLOPS are the
case's FLOPs by the project's FLOP model (kernels.operators) over our median latency; a
power_check file whose recorded TFLOPS disagree with that model is refused (its shape or model
was not ours).

One call compares figures from ONE GPU (a power_check file written before it named its GPU takes
`--gpu`); it prints per case and implementation the published TFLOPS and ours per recipe with
ours/published, then per recipe how many comparable cases are within the table's tolerance, and
the median and worst ratio. The Triton row is printed as an indication only (the paper's is the
Triton tutorial kernel, not ours) and never counted. Nothing here needs a GPU, duckdb,
streamlit or plotly.

    PYTHONPATH=. python3 scripts/published_check.py --gpu "NVIDIA H100 80GB HBM3" \
        tests/data/power_check/h100-2026-11-26-8131799.json tests/data/bundles/h100-fa-grid-fp16-8131799.tgz
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from attnwatch.kernels.cases import parse_case_id  # noqa: E402
from attnwatch.kernels.operators import get_operator  # noqa: E402
from attnwatch.kernels.shapes import SHAPES  # noqa: E402

DEFAULT_TABLE = REPO_ROOT / "docs" / "data" / "published_fa3_h100.toml"
TOKENS, HIDDEN = 16384, 2048  # the paper's grid: batch x seqlen and heads x head dim
# A power_check file's recorded TFLOPS must agree with our FLOP model this closely.
MODEL_AGREEMENT = 1e-6


class PublishedError(ValueError):
    """A bad table or input: one line naming the file and the field."""


@dataclass(frozen=True)
class Published:
    implementation: str
    variant: str
    comparable: bool
    tflops: float


@dataclass
class Table:
    path: Path
    source: dict
    within: float
    entries: dict[tuple[str, str, str], Published]  # (variant, shape id, mode) -> published


@dataclass
class Ours:
    column: str  # the recipe ("plain", "paced_duty", ...); "run <recipe>" for a bundle
    tflops: float
    processes: int


@dataclass
class Inputs:
    gpu: str | None = None
    values: dict[tuple[str, str, str, str], dict[str, Ours]] = field(default_factory=dict)  # case key -> column -> ours
    columns: list[str] = field(default_factory=list)


def _need(mapping: dict, key: str, kind: type | tuple, path: Path, where: str):
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise PublishedError(f"{path}: {where}{key}: missing or not {getattr(kind, '__name__', kind)}")
    return value


def grid_shape(seq_len: int, head_dim: int, path: Path, where: str):
    """Our shape `fa_s<S>_d<D>`, checked to be the paper's grid (B*S = 16k, H*D = 2048)."""
    shape = SHAPES.get(f"fa_s{seq_len}_d{head_dim}")
    if shape is None or shape.batch * shape.seq_len != TOKENS or shape.heads * shape.head_dim != HIDDEN:
        raise PublishedError(
            f"{path}: {where}: no shape fa_s{seq_len}_d{head_dim} of the paper's grid "
            f"(batch x seqlen = {TOKENS}, heads x head dim = {HIDDEN})"
        )
    return shape


def load_table(path: Path) -> Table:
    """The published table, every entry checked against our shapes and variants' mapping."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PublishedError(f"{path}: published table not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PublishedError(f"{path}: not valid TOML: {exc}") from None
    source = _need(data, "source", dict, path, "")
    seq_lens = _need(source, "seq_lens", list, path, "source.")
    target = _need(data, "target", dict, path, "")
    within = _need(target, "within", float, path, "target.")
    impls = {}
    for i, row in enumerate(_need(data, "implementation", list, path, "")):
        where = f"implementation[{i}]."
        for key in ("name", "variant", "reason"):
            _need(row, key, str, path, where)
        impls[row["name"]] = (row["variant"], _need(row, "comparable", bool, path, where))
    entries = {}
    for i, row in enumerate(_need(data, "series", list, path, "")):
        where = f"series[{i}]."
        for key in ("source", "reason"):
            _need(row, key, str, path, where)
        name = _need(row, "implementation", str, path, where)
        if name not in impls:
            raise PublishedError(f"{path}: {where}implementation: {name!r} is not an [[implementation]]")
        mode = _need(row, "mode", str, path, where)
        if mode not in ("causal", "noncausal"):
            raise PublishedError(f"{path}: {where}mode: {mode!r} is not causal or noncausal")
        head_dim = _need(row, "head_dim", int, path, where)
        values = _need(row, "tflops", list, path, where)
        if len(values) != len(seq_lens) or not all(isinstance(v, (int, float)) and v > 0 for v in values):
            raise PublishedError(f"{path}: {where}tflops: needs {len(seq_lens)} positive numbers, one per seq_lens")
        variant, comparable = impls[name]
        for seq_len, value in zip(seq_lens, values):
            shape = grid_shape(seq_len, head_dim, path, f"{where}tflops")
            key = (variant, shape.id, mode)
            if key in entries:
                raise PublishedError(f"{path}: {where}: {name} {shape.id} {mode} given twice")
            entries[key] = Published(name, variant, comparable, float(value))
    return Table(path, source, within, entries)


def model_tflops(shape_id: str, mode: str, median_us: float) -> float:
    """The case's FLOPs by the project's model (kernels.operators) over a median latency."""
    return get_operator("attention").flops(SHAPES[shape_id], mode) / (median_us * 1e-6) / 1e12


def _add(inputs: Inputs, path: Path, gpu: str | None, key: tuple, ours: Ours) -> None:
    if gpu and inputs.gpu and gpu != inputs.gpu:
        raise PublishedError(f"{path}: GPU {gpu!r} is not {inputs.gpu!r}: compare one GPU per call")
    inputs.gpu = inputs.gpu or gpu
    column = inputs.values.setdefault(key, {})
    if ours.column in column:
        raise PublishedError(f"{path}: {'/'.join(key)}: a second {ours.column!r} figure (one input per recipe)")
    column[ours.column] = ours
    if ours.column not in inputs.columns:
        inputs.columns.append(ours.column)


def read_power_check(path: Path, gpu: str | None, table: Table, inputs: Inputs) -> None:
    """A power_check.json: per "recipe|case id", the median of the per-process medians."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishedError(f"{path}: not a readable power_check JSON file: {exc}") from None
    gpu = report.get("gpu_name") or gpu
    if not gpu:
        raise PublishedError(f"{path}: gpu_name: the file names no GPU; pass --gpu")
    for recipe in report.get("recipes_asked") or []:  # columns in the order the call ran them
        if recipe not in inputs.columns:
            inputs.columns.append(recipe)
    for name, case in _need(report, "cases", dict, path, "").items():
        recipe, _, case_id = name.partition("|")
        try:
            variant, shape_id, dtype, mode = parse_case_id(case_id)
        except ValueError as exc:
            raise PublishedError(f"{path}: cases[{name!r}]: {exc}") from None
        if (variant, shape_id, mode) not in table.entries:
            continue
        medians = _need(case, "medians_us", list, path, f"cases[{name!r}].")
        recorded = case.get("tflops") or []
        if not medians or not all(isinstance(m, (int, float)) and m > 0 for m in medians):
            raise PublishedError(f"{path}: cases[{name!r}].medians_us: needs positive latencies")
        for median_us, tflops in zip(medians, recorded):
            if tflops is not None and abs(model_tflops(shape_id, mode, median_us) / tflops - 1) > MODEL_AGREEMENT:
                raise PublishedError(f"{path}: cases[{name!r}].tflops: {tflops:.1f} disagrees with the FLOP model")
        ours = Ours(recipe, model_tflops(shape_id, mode, statistics.median(medians)), len(medians))
        _add(inputs, path, gpu, (variant, shape_id, dtype, mode), ours)


def read_bundle(path: Path, table: Table, inputs: Inputs) -> None:
    """An `attnwatch run` bundle, through history.contract's reader; its manifest names the GPU."""
    from attnwatch.history.contract.validate import load_bundle
    from attnwatch.history.errors import BundleError

    try:
        bundle = load_bundle(path)
    except BundleError as exc:
        raise PublishedError(str(exc)) from None
    gpu = bundle.manifest.environment.gpu_name
    for t in bundle.timings:
        mode = "causal" if t.causal else "noncausal"
        if t.operator != "attention" or (t.variant, t.shape_id, mode) not in table.entries:
            continue
        shape = SHAPES[t.shape_id]
        if (t.batch, t.heads, t.seq_q, t.head_dim) != (shape.batch, shape.heads, shape.seq_len, shape.head_dim):
            raise PublishedError(f"{path}: timings {t.case_id}: sizes are not those of shape {t.shape_id}")
        ours = Ours(f"run {t.timing_recipe or 'plain'}", model_tflops(t.shape_id, mode, t.median_us), 1)
        _add(inputs, path, gpu, (t.variant, t.shape_id, t.dtype, mode), ours)


def read_packed_bundle(path: Path, table: Table, inputs: Inputs) -> None:
    """A bundle kept as a .tgz of its one directory (tests/data/bundles), unpacked to a temp dir."""
    with tempfile.TemporaryDirectory(prefix="published_check_") as tmp:
        try:
            with tarfile.open(path) as tar:
                tar.extractall(tmp, filter="data")
        except (OSError, tarfile.TarError) as exc:
            raise PublishedError(f"{path}: not a readable bundle archive: {exc}") from None
        dirs = [p.parent for p in Path(tmp).glob("*/manifest.json")]
        if len(dirs) != 1:
            raise PublishedError(f"{path}: the archive holds {len(dirs)} bundle directories, not one")
        try:
            read_bundle(dirs[0], table, inputs)
        except PublishedError as exc:  # name the archive, never the temp dir
            raise PublishedError(str(exc).replace(str(dirs[0]), str(path))) from None


def read_inputs(paths: list[Path], gpu: str | None, table: Table) -> Inputs:
    inputs = Inputs()
    for path in paths:
        if path.is_dir():
            read_bundle(path, table, inputs)
        elif path.name.endswith((".tgz", ".tar.gz")):
            read_packed_bundle(path, table, inputs)
        elif path.is_file():
            read_power_check(path, gpu, table, inputs)
        else:
            raise PublishedError(f"{path}: no such file or bundle directory")
    if not inputs.values:
        raise PublishedError(f"{', '.join(map(str, paths))}: no case of the published table")
    return inputs


def compare(table: Table, inputs: Inputs) -> dict:
    """Rows (case, implementation, published, ours and ratio per column) and the summary per column."""
    rows = []
    for key in sorted(inputs.values, key=lambda k: (SHAPES[k[1]].head_dim, k[3], SHAPES[k[1]].seq_len, k[0], k[2])):
        variant, shape_id, dtype, mode = key
        pub = table.entries[(variant, shape_id, mode)]
        rows.append(
            {
                "case_id": "/".join(key),
                "implementation": pub.implementation,
                "comparable": pub.comparable,
                "published_tflops": pub.tflops,
                "ours": {
                    c: {"tflops": o.tflops, "ratio": o.tflops / pub.tflops, "processes": o.processes}
                    for c, o in inputs.values[key].items()
                },
            }
        )
    summary = {}
    for column in inputs.columns:
        mine = [r for r in rows if r["comparable"] and column in r["ours"]]
        groups = {
            "all": mine,
            **{
                i: [r for r in mine if r["implementation"] == i]
                for i in dict.fromkeys(r["implementation"] for r in mine)
            },
        }
        summary[column] = {name: _summary(group, column, table.within) for name, group in groups.items() if group}
    return {
        "gpu": inputs.gpu,
        "published": table.source,
        "within": table.within,
        "columns": inputs.columns,
        "rows": rows,
        "summary": summary,
    }


def _summary(rows: list[dict], column: str, within: float) -> dict:
    """How many rows are within the tolerance (and how many above / below it), median and worst ratio
    (the one farthest from 1 on a log scale: twice as fast is as far as half as fast)."""
    ratios = [(r["ours"][column]["ratio"], r["case_id"]) for r in rows]
    worst = max(ratios, key=lambda rc: abs(math.log(rc[0])))
    return {
        "cases": len(ratios),
        "within": sum(1 for r, _ in ratios if abs(r - 1) <= within),
        "above": sum(1 for r, _ in ratios if r - 1 > within),
        "below": sum(1 for r, _ in ratios if 1 - r > within),
        "median_ratio": statistics.median(r for r, _ in ratios),
        "worst_ratio": worst[0],
        "worst_case": worst[1],
    }


def render(result: dict) -> list[str]:
    src, columns = result["published"], result["columns"]
    lines = [
        f"Published: {src['figure']}, {src['citation']}: a {src['year']} table measured on an {src['gpu']} "
        f"with that year's FlashAttention and cuDNN releases (ours are later).",
        f"Ours: {result['gpu']}. Ratio = ours / published; within {result['within']:.0%} counts comparable rows only; "
        "'*' = indicative: the paper's Triton is the Triton tutorial kernel, not our triton_fa2.",
        "",
        f"{'case':<42} {'implementation':<17} {'published':>9}" + "".join(f" {c:>18}" for c in columns),
    ]
    for r in result["rows"]:
        cells = "".join(
            f" {'-':>18}" if c not in r["ours"] else f" {r['ours'][c]['tflops']:>10.1f} {r['ours'][c]['ratio']:>7.3f}"
            for c in columns
        )
        name = r["implementation"] + ("" if r["comparable"] else " *")
        lines.append(f"{r['case_id']:<42} {name:<17} {r['published_tflops']:>9.0f}{cells}")
    for c in columns:  # a process cut by its deadline leaves a case fewer medians: say which
        most = max((r["ours"][c]["processes"] for r in result["rows"] if c in r["ours"]), default=0)
        lines += [
            f"{c}: {r['case_id']} from {r['ours'][c]['processes']} of {most} processes"
            for r in result["rows"]
            if c in r["ours"] and r["ours"][c]["processes"] < most
        ]
    lines += [
        "",
        f"{'recipe':<18} {'implementation':<17} {'cases':>5} {'within':>6} {'above':>5} {'below':>5} "
        f"{'median ratio':>12} {'worst ratio':>11}  worst case",
    ]
    for column, groups in result["summary"].items():
        for name, s in groups.items():
            lines.append(
                f"{column:<18} {name:<17} {s['cases']:>5} {s['within']:>6} {s['above']:>5} {s['below']:>5} "
                f"{s['median_ratio']:>12.3f} {s['worst_ratio']:>11.3f}  {s['worst_case']}"
            )
    return lines


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "inputs", nargs="+", type=Path, help="power_check JSON files and/or attnwatch run bundle directories (or .tgz)"
    )
    p.add_argument("--gpu", default=None, help="the GPU of power_check files that do not name it")
    p.add_argument("--table", type=Path, default=DEFAULT_TABLE, help="the published table (TOML)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows and summary here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        table = load_table(args.table)
        result = compare(table, read_inputs(args.inputs, args.gpu, table))
    except PublishedError as exc:
        print(f"published_check: {exc}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print("\n".join(render(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
