"""Block configurations of the Triton FA2 forward, read from `configs.toml` (data, one reason
per entry), and the rule that picks the candidates for a problem.

A problem's bucket is (head_dim, causal, sequence-length bucket); the tuner times that bucket's
candidates on the device and keeps the fastest (per exact problem). Candidates a problem cannot
run exactly (TMA with S not a multiple of both block sizes) are
dropped here, before anything is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from attnwatch.toml_reader import read_toml

CONFIG_FILE = Path(__file__).resolve().with_name("configs.toml")


class ConfigError(ValueError):
    """The config table is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class BlockConfig:
    name: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool
    warp_specialize: bool
    reason: str
    split_kv: int = 1  # programs per query tile, each over a share of the keys (1 = off)

    def as_record(self) -> dict:
        """The fields a run records (BuildReport.config / Prepared.info), in Triton's names."""
        return {
            "name": self.name,
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            "tma": self.tma,
            "warp_specialize": self.warp_specialize,
            "split_kv": self.split_kv,
        }


@dataclass(frozen=True)
class Bucket:
    head_dim: int
    causal: bool
    seq_max: int  # the bucket holds seq_len <= seq_max (the last bucket of a table is open)
    candidates: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class ConfigTable:
    configs: dict[str, BlockConfig]
    buckets: tuple[Bucket, ...]
    interpreter: tuple[str, ...]
    interpreter_max_work: int
    interpreter_reason: str
    tie_margin: float  # a candidate must beat an earlier-listed one by more than this share

    def bucket_for(self, head_dim: int, causal: bool, seq_len: int) -> Bucket | None:
        """The smallest bucket (by seq_max) of this head_dim and causality that holds seq_len."""
        matching = [b for b in self.buckets if b.head_dim == head_dim and b.causal == causal]
        if not matching:
            return None
        ordered = sorted(matching, key=lambda b: b.seq_max)
        for bucket in ordered:
            if seq_len <= bucket.seq_max:
                return bucket
        return ordered[-1]  # longer than every bucket: the longest bucket's candidates

    def candidates(self, head_dim: int, causal: bool, seq_len: int, *, interpreter: bool = False) -> list[BlockConfig]:
        """Configs that can run this problem exactly, best guess first."""
        if interpreter:
            names = self.interpreter
        else:
            bucket = self.bucket_for(head_dim, causal, seq_len)
            names = bucket.candidates if bucket else ()
        return [c for c in (self.configs[n] for n in names) if runs_exactly(c, causal, seq_len)]

    def head_dims(self) -> set[int]:
        return {b.head_dim for b in self.buckets}


def runs_exactly(config: BlockConfig, causal: bool, seq_len: int) -> bool:
    """Whether the kernel computes this problem exactly with `config` (see fa2_fwd)."""
    if config.tma and (seq_len % config.block_m or seq_len % config.block_n):
        return False
    return True


_INT_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")
_POW2 = {16, 32, 64, 128, 256}


def _need(entry: dict, key: str, kind: type, where: str):
    if key not in entry:
        raise ConfigError(f"{where}: missing field {key!r}")
    value = entry[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where}: field {key!r} must be an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise ConfigError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def parse_table(data: dict, source: str) -> ConfigTable:
    """Validate the decoded TOML; every error names `source` and the offending entry/field."""
    configs: dict[str, BlockConfig] = {}
    for i, entry in enumerate(data.get("config", [])):
        where = f"{source}: [[config]] #{i + 1}"
        name = _need(entry, "name", str, where)
        where = f"{source}: config {name!r}"
        if name in configs:
            raise ConfigError(f"{where}: defined twice")
        values = {f: _need(entry, f, int, where) for f in _INT_FIELDS}
        for f in ("block_m", "block_n"):
            if values[f] not in _POW2:
                raise ConfigError(f"{where}: field {f!r} must be one of {sorted(_POW2)}, got {values[f]}")
        if values["num_warps"] not in (1, 2, 4, 8, 16):
            raise ConfigError(f"{where}: field 'num_warps' must be a power of two <= 16")
        if not 1 <= values["num_stages"] <= 8:
            raise ConfigError(f"{where}: field 'num_stages' must be in 1..8")
        reason = _need(entry, "reason", str, where)
        if not reason.strip():
            raise ConfigError(f"{where}: field 'reason' is empty")
        split_kv = _need(entry, "split_kv", int, where) if "split_kv" in entry else 1
        if not 1 <= split_kv <= 8:
            raise ConfigError(f"{where}: field 'split_kv' must be in 1..8, got {split_kv}")
        configs[name] = BlockConfig(
            name=name,
            tma=bool(entry.get("tma", False)),
            warp_specialize=bool(entry.get("warp_specialize", False)),
            reason=reason,
            split_kv=split_kv,
            **values,
        )

    buckets = []
    for i, entry in enumerate(data.get("bucket", [])):
        where = f"{source}: [[bucket]] #{i + 1}"
        head_dim = _need(entry, "head_dim", int, where)
        causal = _need(entry, "causal", bool, where)
        seq_max = _need(entry, "seq_max", int, where)
        names = tuple(_need(entry, "candidates", list, where))
        if not names:
            raise ConfigError(f"{where}: field 'candidates' is empty")
        for n in names:
            if n not in configs:
                raise ConfigError(f"{where}: field 'candidates' names unknown config {n!r}")
        reason = _need(entry, "reason", str, where)
        buckets.append(Bucket(head_dim, causal, seq_max, names, reason))

    interp = data.get("interpreter")
    if not isinstance(interp, dict):
        raise ConfigError(f"{source}: missing table [interpreter]")
    where = f"{source}: [interpreter]"
    interp_names = tuple(_need(interp, "candidates", list, where))
    for n in interp_names:
        if n not in configs:
            raise ConfigError(f"{where}: field 'candidates' names unknown config {n!r}")
    tuner = data.get("tuner")
    if not isinstance(tuner, dict):
        raise ConfigError(f"{source}: missing table [tuner]")
    margin = tuner.get("tie_margin")
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 0.5:
        raise ConfigError(f"{source}: [tuner] field 'tie_margin' must be a number in [0, 0.5), got {margin!r}")
    _need(tuner, "reason", str, f"{source}: [tuner]")
    return ConfigTable(
        configs=configs,
        buckets=tuple(buckets),
        interpreter=interp_names,
        interpreter_max_work=_need(interp, "max_work", int, where),
        interpreter_reason=_need(interp, "reason", str, where),
        tie_margin=float(margin),
    )


def load_table(path: Path = CONFIG_FILE) -> ConfigTable:
    data = read_toml(path, "configuration table", ConfigError)
    return parse_table(data, str(path))
