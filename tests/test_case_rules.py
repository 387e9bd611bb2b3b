"""history/analysis/case_rules.toml: a per-case minimum effect and ignore rules with a reason and an expiry,
applied by compare (verdicts, the PR comment, the check's exit) and checked with one-line errors."""

from __future__ import annotations

import datetime as dt
import pytest

from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import load_report, write_report
from compare_factory import make_report
from attnwatch.history.analysis.case_rules import REPO_CASE_RULES, CaseRulesError, load_case_rules

SLOW = "sdpa_flash/b4_h16_s1k/fp16/noncausal"
BROKEN = "sdpa_cudnn/b16_h16_s2k/fp16/noncausal"


def _rules(tmp_path, text: str):
    path = tmp_path / "case_rules.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_repository_file_loads():
    load_case_rules(REPO_CASE_RULES)


def test_a_per_case_min_effect_decides_that_case_alone(tmp_path, fixtures_dir):
    rules = load_case_rules(
        _rules(
            tmp_path,
            """
[[min_effect]]
case = "sdpa_flash/b4_*"
gpu = "NVIDIA H200"
min_effect = 0.08
reason = "test: this case needs an 8% step"
""",
        )
    )
    plain = make_report(fixtures_dir, slowdown={SLOW: 1.06})
    ruled = make_report(fixtures_dir, slowdown={SLOW: 1.06}, rules=rules)
    verdict = lambda report: next(c for c in report.cases if c.case_id == SLOW)  # noqa: E731
    assert verdict(plain).verdict == "regression" and verdict(plain).min_effect is None
    assert verdict(ruled).verdict == "no change" and verdict(ruled).min_effect == 0.08
    assert not ruled.should_fail()
    assert "slower, under the 8% threshold" in render_comment(ruled)
    # The rule travels in compare.json and survives the untrusted-artifact check.
    again = load_report(write_report(ruled, tmp_path / "compare.json"))
    assert verdict(again).min_effect == 0.08


def test_an_ignored_case_is_shown_with_its_reason_and_fails_nothing_until_it_expires(tmp_path, fixtures_dir):
    tomorrow = dt.date.today() + dt.timedelta(days=1)
    text = f'''
[[ignore]]
case = "{SLOW}"
reason = "test: waiting on the upstream fix"
expires = {tomorrow.isoformat()}

[[ignore]]
case = "{BROKEN}"
reason = "test: long expired"
expires = 2020-01-01
'''
    rules = load_case_rules(_rules(tmp_path, text))
    report = make_report(fixtures_dir, slowdown={SLOW: 1.06}, head_incorrect={BROKEN}, rules=rules)
    slow = next(c for c in report.cases if c.case_id == SLOW)
    assert (
        slow.verdict == "regression" and slow.ignored == f"ignored until {tomorrow}: test: waiting on the upstream fix"
    )
    assert report.regressions == [] and [c.case_id for c in report.correctness_failures] == [BROKEN]  # expired: counts
    body = render_comment(report)
    assert "#### Ignored cases" in body and "waiting on the upstream fix" in body and "1 ignored case" in body
    assert "long expired" not in body
    alone = make_report(fixtures_dir, slowdown={SLOW: 1.06}, rules=rules)
    assert not alone.should_fail() and body.splitlines()[1].startswith("### ❌")


@pytest.mark.parametrize(
    "text, field",
    [
        ('[[ignore]]\ncase = "x/*"\nreason = "r"\n', "ignore[0].expires"),
        ('[[ignore]]\ncase = "x/*"\nexpires = 2026-01-01\n', "ignore[0].reason"),
        ('[[min_effect]]\ncase = "x/*"\nmin_effect = 2.0\nreason = "r"\n', "min_effect[0].min_effect"),
        (
            '[[min_effect]]\ncase = "x/*"\nmin_effect = 0.05\nreason = "r"\nmin_efect = 1\n',
            "min_effect[0]: unknown keys",
        ),
        ('[ignore]\ncase = "x"\n', "[[ignore]]: expected an array of tables"),
    ],
)
def test_bad_rules_are_one_line_errors_naming_the_file_and_field(tmp_path, text, field):
    path = _rules(tmp_path, text)
    with pytest.raises(CaseRulesError) as err:
        load_case_rules(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path)) and field in message
