"""A configuration change between the sides of a compare: in compare.json and said in the comment."""

from __future__ import annotations

import dataclasses
import json

from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.analysis import compare_rounds
from attnwatch.ci.compare.report import COMPARE_SCHEMA_VERSION, load_report, write_report
from compare_factory import make_report, make_rounds
from attnwatch.history.analysis.thresholds import load_thresholds

TRITON_CASE = "sdpa_flash/b4_h16_s1k/fp16/noncausal"  # stands in for a tuned kernel's case


def _with_configs(rounds, configs_by_round):
    for data, config in zip(rounds, configs_by_round):
        data.cases[TRITON_CASE].timing = {"kernel_config": config}
    return rounds


def _report(fixtures_dir, base_configs, head_configs, slowdown=1.06):
    base, head = make_rounds(fixtures_dir, slowdown={TRITON_CASE: slowdown})
    _with_configs(base, base_configs)
    _with_configs(head, head_configs)
    template = make_report(fixtures_dir)
    cases = compare_rounds(base, head, load_thresholds("NVIDIA H200"), method="hierarchical", resamples=400)
    return dataclasses.replace(template, cases=cases)


def test_the_comment_says_the_autotuner_chose_differently_apart_from_the_verdict(fixtures_dir, tmp_path):
    report = _report(fixtures_dir, ["m64_n64_w4_s3"] * 3, ["m64_n128_w4_s3"] * 3)
    case = next(c for c in report.cases if c.case_id == TRITON_CASE)
    assert case.base.kernel_configs == ["m64_n64_w4_s3"] and case.head.kernel_configs == ["m64_n128_w4_s3"]
    assert case.config_change == ("m64_n64_w4_s3", "m64_n128_w4_s3")
    body = render_comment(report)
    section = body[body.index("#### Kernel configuration changes") :].replace("`", "")
    assert "autotuner chose m64_n128_w4_s3 instead of m64_n64_w4_s3" in section.split("\n\n")[1]
    assert TRITON_CASE in section.split("\n\n")[1]
    # compare.json keeps it, through the validating reader
    path = write_report(report, tmp_path / "compare.json")
    assert load_report(path) == report


def test_same_configuration_on_both_sides_adds_no_section(fixtures_dir):
    report = _report(fixtures_dir, ["m64_n64_w4_s3"] * 3, ["m64_n64_w4_s3"] * 3)
    assert "Kernel configuration changes" not in render_comment(report)
    assert all(c.config_change is None for c in report.cases)


def test_a_side_whose_rounds_ran_different_configurations_is_named(fixtures_dir):
    report = _report(fixtures_dir, ["m64_n64_w4_s3"] * 3, ["m64_n64_w4_s3", "m64_n128_w4_s3", "m64_n64_w4_s3"])
    body = render_comment(report).replace("`", "")
    assert "the head ran m64_n64_w4_s3, m64_n128_w4_s3 in different rounds" in body


def test_a_version_1_compare_json_still_loads_with_no_configurations(fixtures_dir, tmp_path):
    report = make_report(fixtures_dir)
    document = json.loads(write_report(report, tmp_path / "new.json").read_text())
    document["schema_version"] = 1
    for case in document["cases"]:
        del case["explanation"]  # added in version 3
        for side in ("base", "head"):
            del case[side]["kernel_configs"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(document))
    loaded = load_report(old)
    assert all(c.base.kernel_configs == [] and c.head.kernel_configs == [] for c in loaded.cases)
    assert all(c.explanation is None for c in loaded.cases)
    assert loaded.schema_version == COMPARE_SCHEMA_VERSION
