"""The float64 reference cache (kernels.reference_cache): a second check of a case reads the stored
output instead of recomputing it, and an entry that is corrupt, truncated, filed under another key
or whose digest does not match is ignored, recomputed and overwritten, never used. Real files on
disk, torch on CPU, small shapes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from attnwatch.kernels import reference_cache
from attnwatch.kernels.cases import Case
from attnwatch.kernels.compile_cache import CacheEntryWarning, default_cache_dir
from attnwatch.kernels.correctness import check_case
from attnwatch.kernels.inputs import input_profile
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.shapes import adhoc_shape

CPU = torch.device("cpu")
ATTENTION = get_operator("attention")


def _case(seq: int = 33, causal: bool = True, dtype: str = "fp16") -> Case:
    return Case("sdpa", adhoc_shape(1, 2, seq, 64), dtype, causal)


class CountingOperator:
    """Attention, counting how often its reference is really computed."""

    def __init__(self) -> None:
        self.computed = 0
        self.name = ATTENTION.name
        self.make_inputs = ATTENTION.make_inputs

    def reference64(self, inputs, mode):
        self.computed += 1
        return ATTENTION.reference64(inputs, mode)


def _inputs(case: Case, seed: int, profile: str = "normal"):
    with input_profile(profile):
        return ATTENTION.make_inputs(case.shape, case.dtype, case.mode, CPU, seed)


def _reference(op, case, seed, directory, profile="normal"):
    return reference_cache.cached_reference(op, case, _inputs(case, seed, profile), seed, profile, directory=directory)


def _entry(op, directory: Path, case: Case, seed: int, profile: str = "normal") -> tuple[Path, Path]:
    fields = reference_cache.key_fields(op, case, seed, profile, "cpu")
    key = reference_cache.entry_key(fields)
    return directory / f"{key}{reference_cache.SUFFIX}", directory / f"{key}.json"


def _fresh(case: Case, seed: int) -> torch.Tensor:
    return ATTENTION.reference64(_inputs(case, seed), case.mode)


# ---------------------------------------------------------------- hits


def test_the_second_reference_of_a_case_is_read_back_bit_for_bit(tmp_path):
    op, case = CountingOperator(), _case()
    first = _reference(op, case, 3, tmp_path)
    second = _reference(op, case, 3, tmp_path)
    assert op.computed == 1
    assert second.dtype == torch.float64 and torch.equal(first, second)
    data, meta = _entry(op, tmp_path, case, 3)
    assert data.stat().st_size == first.numel() * 8 and json.loads(meta.read_text())["shape"] == list(first.shape)


def test_the_key_is_the_case_seed_profile_and_code_never_the_variant(tmp_path):
    op = CountingOperator()
    _reference(op, _case(), 0, tmp_path)
    other_variant = Case("torch_3op", _case().shape, "fp16", True)
    _reference(op, other_variant, 0, tmp_path)
    assert op.computed == 1  # another variant of the same case shares the entry
    for case, seed, profile in (
        (_case(causal=False), 0, "normal"),
        (_case(dtype="bf16"), 0, "normal"),
        (_case(seq=34), 0, "normal"),
        (_case(), 1, "normal"),
        (_case(), 0, "large_logits"),
    ):
        before = op.computed
        ref = _reference(op, case, seed, tmp_path, profile)
        assert op.computed == before + 1, (case.id, seed, profile)
        assert torch.equal(ref, ATTENTION.reference64(_inputs(case, seed, profile), case.mode))


def test_a_change_of_the_reference_code_is_a_new_key(tmp_path, monkeypatch):
    fields = reference_cache.key_fields(ATTENTION, _case(), 0, "normal", "cpu")
    sources = reference_cache._relative_imports(Path(reference_cache.__file__).with_name("operators.py"))
    names = {p.name for p in sources}
    assert {"reference.py", "inputs.py", "shapes.py"} <= names  # what attention's reference and inputs import
    copy = tmp_path / "reference.py"
    copy.write_text(Path(reference_cache.__file__).with_name("reference.py").read_text() + "\n# edited\n")
    digest = reference_cache.code_digest(Path(reference_cache.__file__).with_name("reference.py"))
    assert reference_cache.code_digest(copy) != digest
    monkeypatch.setattr(torch, "__version__", "0.0.0-other")
    assert reference_cache.entry_key(
        reference_cache.key_fields(ATTENTION, _case(), 0, "normal", "cpu")
    ) != reference_cache.entry_key(fields)


def test_inputs_other_than_the_seeds_own_are_never_answered_from_the_cache(tmp_path):
    op, case = CountingOperator(), _case()
    _reference(op, case, 0, tmp_path)
    q, k, v = _inputs(case, 0)
    own = (q, k, v * 2)  # a variant's prepare that made its own inputs
    ref = reference_cache.cached_reference(op, case, own, 0, "normal", directory=tmp_path)
    assert op.computed == 2 and torch.equal(ref, ATTENTION.reference64(own, case.mode))


def test_check_case_uses_the_cache_under_the_cache_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path))
    monkeypatch.delenv("ATTNWATCH_TRUST", raising=False)
    case = _case()
    first = check_case("sdpa", case, CPU, seeds=(0,))
    assert first[0].passed, first
    directory = default_cache_dir("reference")
    assert directory == tmp_path / "reference" / "local" and len(list(directory.glob("*.f64"))) == 1
    assert check_case("torch_3op", Case("torch_3op", case.shape, "fp16", True), CPU, seeds=(0,))[0].passed


# ---------------------------------------------------------------- entries never trusted


def _corrupt_bytes(data: Path, meta: Path) -> None:
    raw = bytearray(data.read_bytes())
    raw[8] ^= 0xFF
    data.write_bytes(bytes(raw))


def _truncate(data: Path, meta: Path) -> None:
    data.write_bytes(data.read_bytes()[:-8])


def _garbage_meta(data: Path, meta: Path) -> None:
    meta.write_text('{"key": ')


def _digest_mismatch(data: Path, meta: Path) -> None:
    record = json.loads(meta.read_text())
    record["sha256"] = "0" * 64
    meta.write_text(json.dumps(record))


def _tampered_both(data: Path, meta: Path) -> None:
    """Bytes and digest rewritten together, but the shape no longer holds them."""
    import hashlib

    payload = data.read_bytes()[:-8]
    data.write_bytes(payload)
    record = json.loads(meta.read_text())
    record["sha256"] = hashlib.sha256(payload).hexdigest()
    meta.write_text(json.dumps(record))


PLANTS = {
    "corrupt bytes": _corrupt_bytes,
    "truncated": _truncate,
    "unreadable metadata": _garbage_meta,
    "digest mismatch": _digest_mismatch,
    "shape does not hold the bytes": _tampered_both,
}


@pytest.mark.parametrize("plant", PLANTS, ids=list(PLANTS))
def test_a_damaged_entry_is_recomputed_and_overwritten(tmp_path, plant):
    op, case = CountingOperator(), _case()
    expected = _reference(op, case, 0, tmp_path)
    data, meta = _entry(op, tmp_path, case, 0)
    PLANTS[plant](data, meta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheEntryWarning)
        again = _reference(op, case, 0, tmp_path)
    assert op.computed == 2 and torch.equal(again, expected)
    assert torch.equal(_reference(op, case, 0, tmp_path), expected) and op.computed == 2  # the rewrite is a hit


def test_an_entry_filed_under_another_key_is_foreign_and_ignored(tmp_path):
    """Seed 1's verified entry copied under seed 0's name: its own digest matches, its key does not."""
    op, case = CountingOperator(), _case()
    _reference(op, case, 1, tmp_path)
    for source, target in zip(_entry(op, tmp_path, case, 1), _entry(op, tmp_path, case, 0)):
        target.write_bytes(source.read_bytes())
    with pytest.warns(CacheEntryWarning, match="another key"):
        ref = _reference(op, case, 0, tmp_path)
    assert op.computed == 2 and torch.equal(ref, _fresh(case, 0))


def test_an_entry_another_user_could_write_is_ignored(tmp_path):
    op, case = CountingOperator(), _case()
    _reference(op, case, 0, tmp_path)
    data, _ = _entry(op, tmp_path, case, 0)
    data.chmod(0o666)
    with pytest.warns(CacheEntryWarning, match="writable by"):
        _reference(op, case, 0, tmp_path)
    assert op.computed == 2


def test_an_unsafe_cache_directory_costs_only_the_recomputation(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    op, case = CountingOperator(), _case()
    with pytest.warns(CacheEntryWarning, match="not used"):
        ref = _reference(op, case, 0, shared)
    assert op.computed == 1 and torch.equal(ref, _fresh(case, 0)) and not list(shared.iterdir())


def test_an_output_above_the_size_limit_is_not_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(reference_cache, "MAX_ENTRY_BYTES", 1024)
    op, case = CountingOperator(), _case()
    _reference(op, case, 0, tmp_path)
    _reference(op, case, 0, tmp_path)
    assert op.computed == 2 and not list(tmp_path.glob("*.f64"))


def test_references_computed_on_a_gpu_are_not_cached(tmp_path, monkeypatch):
    """On a GPU computing the float64 reference is faster than reading it back (module doc):
    only CPU-computed references are stored. Played by marking the CPU as a device not cached."""
    monkeypatch.setattr(reference_cache, "CACHED_DEVICES", ("cuda",))
    op, case = CountingOperator(), _case()
    _reference(op, case, 0, tmp_path)
    _reference(op, case, 0, tmp_path)
    assert op.computed == 2 and not list(tmp_path.iterdir())
    monkeypatch.undo()
    assert reference_cache.CACHED_DEVICES == ("cpu",)
