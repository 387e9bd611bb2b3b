"""A run's binaries' static code, from bundle to history: sass.json's one writer and validator,
ingest storing each binary once by digest (migration 016), an older history upgraded, a bundle
without the file ingested as before, and a run reading its cubins' SASS as the compare does.

The code is real: tests/data/ncu/plants/{barrier_at1,unroll_at1}/sass_{base,head}.json.gz are
the plants' two builds as a run's sass.json records them (scripts/plant_sass.py: nvcc and
cuobjdump for sm_90, checked word for word against the SASS diff the H200 compare recorded).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest

from bundle_factory import make_bundle
from old_history import history_at_version

from attnwatch.ci.ncu.sass_record import record_sass
from attnwatch.cli.main import main as cli_main
from attnwatch.history.analysis.sass import binary_digest, find_tool
from attnwatch.history.analysis.sass_diff import IN_LOOP
from attnwatch.history.contract.bundle_writer import NcuFiles, add_ncu
from attnwatch.history.analysis.sass_diff import describe_binaries, diff_binaries
from attnwatch.history.contract.sass_file import check_sass, records_code
from attnwatch.history.contract.validate import load_bundle
from attnwatch.history.detection.stored_code import stored_code_changes
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import parse_location

VARIANTS = ("cuda_wmma", "cuda_wmma_cpasync")
SASS_MIGRATION = 16
REPO = Path(__file__).resolve().parent.parent


def recorded(fixtures_dir, plant: str, side: str):
    path = fixtures_dir / "ncu" / "plants" / plant / f"sass_{side}.json.gz"
    return check_sass(json.loads(gzip.decompress(path.read_bytes())), path)


def sass_bundle(tmp_path, fixtures_dir, name: str, side: str, plant: str = "barrier_at1", **options):
    return make_bundle(
        tmp_path / name,
        run_id=name,
        variants=VARIANTS,
        n_samples=5,
        with_ncu=True,
        sass=recorded(fixtures_dir, plant, side),
        **options,
    )


def test_the_recorded_builds_diff_as_the_gpu_compare_recorded(fixtures_dir):
    """Both plants' stored mixes diff, with the compare's own code, into the description the H200
    compare recorded (its sass.json), word for word."""
    for plant in ("barrier_at1", "unroll_at1"):
        base, head = (records_code(recorded(fixtures_dir, plant, side)) for side in ("base", "head"))
        said = json.loads((fixtures_dir / "ncu" / "plants" / plant / "sass.json").read_text())["describe"]
        assert describe_binaries(diff_binaries(base, head)) == said


def test_ingest_stores_each_binary_once_and_links_every_run_to_it(tmp_path, fixtures_dir):
    """Three runs, two of the base build and one of the head's: the base binaries are stored
    once, every run is linked to its own, and the stored mixes diff as the bundles' do."""
    db = tmp_path / "h.duckdb"
    paths = [sass_bundle(tmp_path, fixtures_dir, f"run-{i}", side) for i, side in enumerate(("base", "base", "head"))]
    ingest_paths(parse_location(db), paths)
    base, head = (recorded(fixtures_dir, "barrier_at1", side) for side in ("base", "head"))
    digests = {b.digest for b in base.binaries} | {b.digest for b in head.binaries}
    kernels = sum(len(b.kernels) for b in base.binaries) + sum(len(b.kernels) for b in head.binaries)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT digest), count(*) FROM sass_kernels").fetchone() == (
            len(digests),
            kernels,
        )
        assert con.execute("SELECT run_id, count(*) FROM run_binaries GROUP BY run_id ORDER BY run_id").fetchall() == [
            ("run-0", 2),
            ("run-1", 2),
            ("run-2", 2),
        ]
        case = con.execute("SELECT case_id FROM results WHERE run_id = 'run-2' AND variant = 'cuda_wmma'").fetchone()[0]
        found = stored_code_changes(con, {("run-2", case): "run-1", ("run-1", case): "run-0"})
    assert list(found) == [("run-2", case)]  # the same binaries on both sides: nothing to say
    # the case's own variant's binaries, as the compare diffs each variant's (ci/compare/binaries.py)
    assert describe_binaries(found[("run-2", case)]) == describe_binaries(
        diff_binaries(variant_code(base, "cuda_wmma"), variant_code(head, "cuda_wmma"))
    )
    assert describe_binaries(found[("run-2", case)]).count("+1 BAR in a loop") == 4


def variant_code(records, variant: str):
    return records_code(records, {v.digest for v in records.variants if v.variant == variant})


def test_a_bundle_without_sass_ingests_as_before_and_its_steps_have_no_code_part(tmp_path, fixtures_dir):
    db = tmp_path / "h.duckdb"
    old = make_bundle(tmp_path / "old", run_id="old", variants=VARIANTS, n_samples=5, with_ncu=True)
    assert not (old / "sass.json").exists() and load_bundle(old).sass is None
    new = sass_bundle(tmp_path, fixtures_dir, "new", "head")
    ingest_paths(parse_location(db), [old, new])
    with open_read(parse_location(db)) as con:
        case = con.execute("SELECT case_id FROM results WHERE run_id = 'new' LIMIT 1").fetchone()[0]
        assert con.execute("SELECT count(*) FROM run_binaries WHERE run_id = 'old'").fetchone() == (0,)
        assert stored_code_changes(con, {("new", case): "old"}) == {}


def test_an_older_history_is_upgraded_and_then_stores_binaries(tmp_path, fixtures_dir):
    """A history at migration 15 (before the binaries' tables) is read without them (a read never
    migrates: no code part, no error), then upgraded by the next ingest."""
    db = history_at_version(tmp_path / "h.duckdb", SASS_MIGRATION - 1, tmp_path / "scratch")
    with open_read(parse_location(db)) as con:
        assert stored_code_changes(con, {("a", "c"): "b"}) == {}
    ingest_paths(parse_location(db), [sass_bundle(tmp_path, fixtures_dir, "run-0", "base")])
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= SASS_MIGRATION
        assert con.execute("SELECT count(*) FROM run_binaries").fetchone()[0] == 2


@pytest.mark.parametrize(
    "damage, field, words",
    [
        (
            lambda d: d["binaries"][0].update(digest="not-a-digest"),
            "binaries[0].digest",
            "is a sha256: 64 lowercase hex",
        ),
        (lambda d: d["binaries"][0]["kernels"][0]["mix"][0].update(where="nearby"), ".mix[0].where", "nearby"),
        (lambda d: d["binaries"][0]["kernels"][0]["mix"][0].update(count=0), ".mix[0].count", ""),
        (lambda d: d["binaries"][0]["kernels"][0].pop("loops"), "kernels[0].loops", "missing"),
        (lambda d: d["variants"][0].update(digest="f" * 64), "variants[0].digest", "not among the binaries"),
        (lambda d: d["binaries"].append(d["binaries"][0]), "binaries[2].digest", "listed twice"),
    ],
)
def test_a_malformed_sass_file_is_refused_in_one_line_naming_file_and_field(
    tmp_path, fixtures_dir, capsys, damage, field, words
):
    good = sass_bundle(tmp_path, fixtures_dir, "good", "base")
    bad = shutil.copytree(good, tmp_path / "bad")
    document = json.loads((bad / "sass.json").read_text())
    damage(document)
    (bad / "sass.json").write_text(json.dumps(document))
    with pytest.raises(BundleError):
        load_bundle(bad)
    db = tmp_path / "h.duckdb"
    assert cli_main(["--db", str(db), "ingest", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sass.json" in err and field in err and words in err, err
    assert not db.exists() or duckdb.connect(str(db), read_only=True).execute(
        "SELECT count(*) FROM runs"
    ).fetchone() == (0,)


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(
    NVCC is None or find_tool("cuobjdump") is None, reason="needs nvcc and cuobjdump to build and read sm_90a cubins"
)
def test_a_run_reads_its_nvcc_variants_cubins_into_the_bundle(tmp_path, monkeypatch):
    """The run's side (ci/ncu/sass_record.py): the variant's cubin built by this checkout's
    kernels (as a GPU run does, here for sm_90a), read with cuobjdump into every kernel's mix,
    keyed by the cubin's sha256, added with the ncu pass and read back by the bundle's reader.
    A variant that is not nvcc-built (Triton, PyTorch) is not read: nothing, and no reason."""
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "cache"))
    assert record_sass(["sdpa", "triton_fa2"], None, tmp_path / "none") == (None, None)
    records, why = record_sass(["cuda_wmma", "sdpa"], REPO, tmp_path / "work", "sm_90a", cache=tmp_path / "sass")
    assert why is None and records is not None
    (binary,) = records.binaries
    cubins = list((tmp_path / "cache").rglob("*.cubin"))
    assert [binary_digest(c) for c in cubins] == [binary.digest]
    assert [(v.variant, v.digest) for v in records.variants] == [("cuda_wmma", binary.digest)]
    assert sorted(k.name for k in binary.kernels) == [
        f"attn_wmma_d{d}_{t}" for d in (128, 64) for t in ("bf16", "fp16")
    ]
    for kernel in binary.kernels:
        assert (
            kernel.loops > 0 and kernel.registers and any(c.opcode == "HMMA" and c.where == IN_LOOP for c in kernel.mix)
        )
    bundle = make_bundle(tmp_path / "bundle", run_id="r", variants=("cuda_wmma",), n_samples=5)
    add_ncu(bundle, NcuFiles(None, [], [], sass=records), finished_at="2099-01-01T00:00:00Z")
    assert load_bundle(bundle).sass == records
