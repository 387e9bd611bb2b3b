"""compare.json is read back as untrusted data: round trip, and every kind of bad input refused."""

from __future__ import annotations

import json

import pytest

from attnwatch.ci.compare.report import COMPARE_SCHEMA_VERSION, MAX_REPORT_BYTES, ReportError, load_report, write_report
from compare_factory import make_report


@pytest.fixture(scope="module")
def good(fixtures_dir, tmp_path_factory):
    report = make_report(fixtures_dir, slowdown={"torch_3op/h100_small/fp16/noncausal": 1.05}, ncu=True)
    return write_report(report, tmp_path_factory.mktemp("cmp") / "compare.json"), report


def test_round_trip(good):
    path, report = good
    assert load_report(path) == report


def _mutate(good, tmp_path, change):
    data = json.loads(good[0].read_text())
    change(data)
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d.update(schema="something.else"), "schema"),
        (lambda d: d.update(schema_version=99), "schema_version"),
        (lambda d: d.update(surprise=1), "surprise: unknown field"),
        (lambda d: d["cases"][0].update(verdict="fine"), "cases[0].verdict"),
        (lambda d: d["cases"][1]["head"].update(median_us=-3), "cases[1].head.median_us"),
        (lambda d: d["cases"][1].update(ratio="1.0"), "cases[1].ratio"),
        (lambda d: d["cases"][2].update(case_id="x" * 5000), "cases[2].case_id"),
        (lambda d: d["cases"][2].update(case_id="a\x1b[31mred"), "cases[2].case_id"),
        (lambda d: d["cases"][0]["base"].update(error=["not", "text"]), "cases[0].base.error"),
        (lambda d: d["cases"].append(d["cases"][0]), "duplicate case ids"),
        (lambda d: d.update(cases={}), "cases"),
        (lambda d: d.update(rounds=True), "rounds"),
        (lambda d: d["environment"].update(nested={"a": 1}), "environment.nested"),
    ],
)
def test_bad_fields_are_named(good, tmp_path, change, field):
    with pytest.raises(ReportError) as exc:
        load_report(_mutate(good, tmp_path, change))
    assert field in str(exc.value) and "compare.json" in str(exc.value)


def test_nan_truncated_oversized_and_missing(good, tmp_path):
    text = good[0].read_text()
    nan = tmp_path / "nan.json"
    nan.write_text(text.replace('"ratio": ', '"ratio": NaN, "x": ', 1))
    with pytest.raises(ReportError, match="NaN"):
        load_report(nan)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ReportError, match="invalid JSON|truncated JSON"):  # which one depends on where the cut falls
        load_report(cut)
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(MAX_REPORT_BYTES + 1)
    with pytest.raises(ReportError, match="limit"):
        load_report(big)
    with pytest.raises(ReportError, match="not found"):
        load_report(tmp_path / "absent.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(ReportError, match="UTF-8"):
        load_report(binary)


def test_comment_command_refuses_a_bad_artifact_without_calling_github(good, tmp_path, capsys, monkeypatch):
    from attnwatch.cli.main import main

    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")  # nothing listens: a call would fail loudly
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    bad = _mutate(good, tmp_path, lambda d: d["cases"][0].update(verdict="<script>"))
    assert main(["comment", "--compare", str(bad), "--pr", "1"]) == 2
    err = capsys.readouterr().err
    assert "cases[0].verdict" in err


def test_a_version_2_compare_json_loads_with_no_explanations(good, tmp_path):
    """compare.json v3 added each case's counter-rule explanation: a v2 file has none."""
    document = json.loads(good[0].read_text())
    document["schema_version"] = 2
    for case in document["cases"]:
        del case["explanation"]
    old = tmp_path / "v2.json"
    old.write_text(json.dumps(document))
    loaded = load_report(old)
    assert loaded.schema_version == COMPARE_SCHEMA_VERSION and all(c.explanation is None for c in loaded.cases)


def test_a_version_3_compare_json_s_gap_to_sdpa_is_the_gap_to_baseline_sdpa(good, tmp_path):
    """compare.json v5 names a side's gap to its operator's baseline; v3's gap_to_sdpa was that
    gap, taken against sdpa."""
    document = json.loads(good[0].read_text())
    document["schema_version"] = 3
    document.pop("selection", None)
    document.pop("times", None)
    gaps = []
    for case in document["cases"]:
        for side in ("base", "head"):
            gaps.append(case[side].pop("gap_to_baseline"))
            del case[side]["baseline_variant"]
            case[side]["gap_to_sdpa"] = gaps[-1]
    old = tmp_path / "v3.json"
    old.write_text(json.dumps(document))
    loaded = load_report(old)
    assert [getattr(c, side).gap_to_baseline for c in loaded.cases for side in ("base", "head")] == gaps
    assert {
        getattr(c, side).baseline_variant
        for c in loaded.cases
        for side in ("base", "head")
        if getattr(c, side).gap_to_baseline is not None
    } == {"sdpa"}
    assert any(g is not None for g in gaps)
