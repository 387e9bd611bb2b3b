"""docs/howto/add-a-counter-rule.md followed in a copy of the checkout: the page's rule, added to
history/analysis/ncu_rules.toml, is loaded and names the cause of a real H200 profile in which
its counter moved (and the checkout's own rules, without it, do not), and the two test files the
page says to run pass with it."""

from __future__ import annotations

import json
import tomllib

from howto_support import ROOT, code_blocks, copy_checkout, run_in

PAGE = "add-a-counter-rule.md"
PROFILE = ROOT / "tests" / "data" / "ncu" / "h200_raw_pr_default.csv"  # the pr set's default list, real
CASE = "cuda_wmma/b4_h16_s1k/fp16/noncausal"

# In the copy's interpreter: the case's real counters as base, the rule's counter doubled as head.
EXPLAIN = """
import json, sys
from attnwatch.ci.ncu.aggregate import group_by_case
from attnwatch.ci.ncu.parse import parse_ncu_csv
from attnwatch.history.analysis.ncu_explain import combine_kernels, explain, load_rules
counter, case = sys.argv[2], sys.argv[3]
base = combine_kernels(k.metrics for k in group_by_case(parse_ncu_csv(sys.argv[1]).kernels)[case])
head = {**base, counter: 2 * base[counter]}
found = explain(base, head, slower=True)
print(json.dumps({"rules": [r.name for r in load_rules()], "cause": found.cause,
                  "fired": [c.rule for c in found.changes]}))
"""


def _explained(checkout, counter: str) -> dict:
    done = run_in(checkout, "-c", EXPLAIN, str(PROFILE), counter, CASE)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_rule_of_the_howto_names_the_cause(tmp_path):
    (block,) = code_blocks(PAGE, "toml")
    (rule,) = tomllib.loads(block)["rule"]
    copy = copy_checkout(tmp_path / "checkout")
    rules = copy / "history" / "analysis" / "ncu_rules.toml"
    rules.write_text(rules.read_text(encoding="utf-8") + "\n" + block, encoding="utf-8")

    (counter,) = rule["counters"]
    before = _explained(ROOT, counter)
    assert rule["name"] not in before["rules"] and not before["cause"].startswith(rule["title"])
    after = _explained(copy, counter)
    assert rule["name"] in after["rules"] and after["fired"][0] == rule["name"]
    assert after["cause"].startswith(rule["title"])

    checked = run_in(
        copy,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "tests/test_ncu_explain.py",
        "tests/test_ncu_parse.py",
        "-k",
        "every_rule_reads or explain_list or bad_rule_file",
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
