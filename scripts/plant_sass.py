"""Record the static code of a plant's two builds as sass.json documents, for tests/data.

tests/data/ncu/plants/<plant>_at<N>/ holds a real compare of one scripts/pr_plants/ patch at
magnitude N on the H200: its compare.json, both sides' ncu profiles and the SASS diff's
description (sass.json). A stored alert's cause needs both sides' static code as a run records
it (bundle sass.json, history/contract/sass_file.py): this builds the plant's variants from this
checkout's kernels/ (base) and with the patch applied (head), for `--arch` (the H200's sm_90 by
default; nvcc and cuobjdump run on a CPU), reads them as a run does (ci/ncu/sass_record.py) and
writes sass_base.json.gz and sass_head.json.gz beside the recording. It refuses to write unless the
two builds' diff reads word for word as the GPU compare's recorded description, so the stored
code is the code the GPU ran as far as the diff can tell.

    PYTHONPATH=. python3 scripts/plant_sass.py barrier 1
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plant_ladder import apply_plant, load_plants  # noqa: E402

from attnwatch.ci.ncu.sass_record import record_sass  # noqa: E402
from attnwatch.history.analysis.sass_diff import describe_binaries, diff_binaries  # noqa: E402
from attnwatch.history.contract.sass_file import records_code, sass_document  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PLANTS_DATA = REPO_ROOT / "tests" / "data" / "ncu" / "plants"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plant")
    parser.add_argument("magnitude")
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    plant = next((p for p in load_plants() if p.name == args.plant), None)
    if plant is None:
        raise SystemExit(f"plant_sass: no plant {args.plant!r} in scripts/pr_plants")
    out = PLANTS_DATA / f"{plant.name}_at{args.magnitude}"
    recorded = json.loads((out / "sass.json").read_text())["describe"]
    with tempfile.TemporaryDirectory(prefix="attnwatch-plant-sass-") as tmp:
        records = {}
        for side in ("base", "head"):
            root = Path(tmp) / side
            shutil.copytree(REPO_ROOT / "kernels", root / "kernels", symlinks=True)
            if side == "head":
                apply_plant(plant, args.magnitude, root)
            records[side], why = record_sass(
                plant.variants, root, Path(tmp) / "work" / side, args.arch, cache=Path(tmp) / "sass-cache"
            )
            if records[side] is None:
                raise SystemExit(f"plant_sass: {side}: {why}")
        described = describe_binaries(diff_binaries(records_code(records["base"]), records_code(records["head"])))
        if described != recorded:
            raise SystemExit(f"plant_sass: the builds' diff reads\n  {described}\nnot the recorded\n  {recorded}")
        for side, found in records.items():
            path = out / f"sass_{side}.json.gz"
            text = json.dumps(sass_document(found, out), indent=1) + "\n"
            path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
            print(f"plant_sass: wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
