"""The recorded block configuration per GPU model and problem (`choices.toml`): data, reviewed.

Timing the candidates in every fresh process (kernels/triton/tuner.py) lets a near-tie go
either way between processes: on an H200 three fresh runs of `b4_h16_s2k` read 159.2, 159.1
and 164.5 us, a step with no code change behind it. So runs read the configuration from this
table instead, and only a problem the table lacks is tuned in the process (and recorded as
such). The table is written by an explicit tuning job (`python3 -m scripts.tune_triton
--write-choices`), which times every candidate interleaved with the others over many rounds
and applies the tuner's own rule (`tuner.pick`: bucket order, tie margin); each entry keeps
the medians it was chosen from, and each GPU's block says when, at which commit, with which
torch and Triton. A change of configuration is thus a diff of this file.

Key: GPU model as CUDA names it (`torch.cuda.get_device_name`, the bundle's gpu_name), the
exact problem (B, H, S, D), dtype and causality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from attnwatch.toml_reader import read_toml

from .configs import ConfigError, ConfigTable, load_table

CHOICES_FILE = Path(__file__).resolve().with_name("choices.toml")
DTYPES = ("fp16", "bf16")


def problem_id(batch: int, heads: int, seq_len: int, head_dim: int) -> str:
    """The table's name of an exact problem, e.g. b4_h16_s2048_d64."""
    return f"b{batch}_h{heads}_s{seq_len}_d{head_dim}"


@dataclass(frozen=True)
class Tuning:
    """Provenance of one GPU's entries: the job that chose them."""

    gpu: str
    date: str
    commit: str
    torch: str
    triton: str
    job: str
    tie_margin: float
    rounds: int


@dataclass(frozen=True)
class Recorded:
    gpu: str
    problem: str
    dtype: str
    causal: bool
    config: str
    trials_us: dict[str, float] = field(default_factory=dict)  # the tuning job's medians


@dataclass(frozen=True)
class ChoiceTable:
    tunings: dict[str, Tuning]
    entries: dict[tuple[str, str, str, bool], Recorded]

    def lookup(self, gpu: str, problem: str, dtype: str, causal: bool) -> Recorded | None:
        return self.entries.get((gpu, problem, dtype, bool(causal)))


def _need(entry: dict, key: str, kind: type, where: str):
    if key not in entry:
        raise ConfigError(f"{where}: missing field {key!r}")
    value = entry[key]
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise ConfigError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def parse_choices(data: dict, source: str, configs: ConfigTable) -> ChoiceTable:
    """Validate the decoded TOML; every error names `source`, the entry and the field."""
    tunings: dict[str, Tuning] = {}
    for i, entry in enumerate(data.get("tuning", [])):
        where = f"{source}: [[tuning]] #{i + 1}"
        gpu = _need(entry, "gpu", str, where)
        if gpu in tunings:
            raise ConfigError(f"{where}: GPU {gpu!r} has two [[tuning]] blocks")
        margin = entry.get("tie_margin")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)):
            raise ConfigError(f"{where}: field 'tie_margin' must be a number, got {margin!r}")
        tunings[gpu] = Tuning(
            gpu=gpu,
            date=_need(entry, "date", str, where),
            commit=_need(entry, "commit", str, where),
            torch=_need(entry, "torch", str, where),
            triton=_need(entry, "triton", str, where),
            job=_need(entry, "job", str, where),
            tie_margin=float(margin),
            rounds=_need(entry, "rounds", int, where),
        )
    entries: dict[tuple[str, str, str, bool], Recorded] = {}
    for i, entry in enumerate(data.get("choice", [])):
        where = f"{source}: [[choice]] #{i + 1}"
        gpu = _need(entry, "gpu", str, where)
        if gpu not in tunings:
            raise ConfigError(f"{where}: GPU {gpu!r} has no [[tuning]] block saying where its choices came from")
        dtype = _need(entry, "dtype", str, where)
        if dtype not in DTYPES:
            raise ConfigError(f"{where}: field 'dtype' must be one of {DTYPES}, got {dtype!r}")
        config = _need(entry, "config", str, where)
        if config not in configs.configs:
            raise ConfigError(f"{where}: field 'config' names {config!r}, which configs.toml does not define")
        trials = entry.get("trials_us", {})
        if not isinstance(trials, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in trials.values()
        ):
            raise ConfigError(f"{where}: field 'trials_us' must map config names to positive medians")
        record = Recorded(
            gpu=gpu,
            problem=_need(entry, "problem", str, where),
            dtype=dtype,
            causal=_need(entry, "causal", bool, where),
            config=config,
            trials_us={k: float(v) for k, v in trials.items()},
        )
        key = (record.gpu, record.problem, record.dtype, record.causal)
        if key in entries:
            raise ConfigError(f"{where}: {key} is recorded twice")
        entries[key] = record
    return ChoiceTable(tunings, entries)


_CACHE: dict[Path, ChoiceTable] = {}


def load_choices(path: Path = CHOICES_FILE, configs: ConfigTable | None = None) -> ChoiceTable:
    """The recorded table (read once per process per file; an absent file is an empty table)."""
    if path in _CACHE:
        return _CACHE[path]
    data = read_toml(path, "recorded choices", ConfigError, missing_ok=True)
    if data is None:
        table = ChoiceTable({}, {})
    else:
        table = parse_choices(data, path.name, configs or load_table())
    _CACHE[path] = table
    return table


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_choices(table: ChoiceTable, header: str) -> str:
    """The table as TOML, in a stable order (GPU, problem, dtype, causal) so a diff shows only
    what a tuning job changed."""
    lines = [header.rstrip(), ""]
    for gpu in sorted(table.tunings):
        t = table.tunings[gpu]
        lines += [
            "[[tuning]]",
            f"gpu = {_toml_str(t.gpu)}",
            f"date = {_toml_str(t.date)}",
            f"commit = {_toml_str(t.commit)}",
            f"torch = {_toml_str(t.torch)}",
            f"triton = {_toml_str(t.triton)}",
            f"job = {_toml_str(t.job)}",
            f"tie_margin = {t.tie_margin}",
            f"rounds = {t.rounds}",
            "",
        ]
    for key in sorted(table.entries):
        r = table.entries[key]
        trials = ", ".join(f"{name} = {us:.2f}" for name, us in r.trials_us.items())
        lines += [
            "[[choice]]",
            f"gpu = {_toml_str(r.gpu)}",
            f"problem = {_toml_str(r.problem)}",
            f"dtype = {_toml_str(r.dtype)}",
            f"causal = {'true' if r.causal else 'false'}",
            f"config = {_toml_str(r.config)}",
            f"trials_us = {{ {trials} }}",
            "",
        ]
    return "\n".join(lines)


def merged(old: ChoiceTable, tuning: Tuning, new: list[Recorded]) -> ChoiceTable:
    """`old` with this GPU's provenance replaced and the new entries over the old ones."""
    entries = dict(old.entries)
    for r in new:
        entries[(r.gpu, r.problem, r.dtype, r.causal)] = r
    return ChoiceTable({**old.tunings, tuning.gpu: tuning}, entries)


HEADER = """\
# Recorded block configuration of triton_fa2 per GPU model and exact problem
# (kernels/triton/choices.py). Runs use the entry for their GPU and problem; a problem with no
# entry is tuned in the process and its results say so (kernel_config_source = "tuned").
# Written by `python3 -m scripts.tune_triton --write-choices` (never by a run): each
# [[tuning]] block says which job, commit, torch and Triton chose that GPU's entries; each
# [[choice]] keeps the tuning job's medians (us, L2 flushed, candidates interleaved) that the
# tuner's rule (bucket order of configs.toml, tie margin) picked from."""
