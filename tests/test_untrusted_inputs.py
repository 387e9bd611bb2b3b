"""The smaller holes of issue 15: PR lookup by SHA, mentions, deep JSON, unknown pytest-benchmark
versions, truncated ncu CSVs and unknown ncu columns. Each is fed through the command a user
runs, against real files and, for GitHub, the loopback server (tests/github_stub.py)."""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import write_report
from attnwatch.ci.ncu.parse import NcuParseError, parse_ncu_csv
from compare_factory import make_report
from github_stub import GitHubStub, StubState
from attnwatch.history.store.db import open_read
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

NCU_DATA = Path(__file__).resolve().parent / "data" / "ncu"
RAW = "h200_raw_sdpa_flash_3op.csv"
HEAD = "c" * 40  # compare_factory's head SHA
# GitHub's mention and issue-reference patterns, as they apply to rendered text outside code.
MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}")
ISSUE_REF = re.compile(r"(?<![\w/])#\d+")


# --- attnwatch comment --sha -----------------------------------------------------------------------


def _comment(gh, tmp_path, fixtures_dir, monkeypatch, *extra):
    path = write_report(make_report(fixtures_dir), tmp_path / "compare.json")
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/kernels")
    monkeypatch.setenv("GITHUB_API_URL", gh.url)
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return cli_main(["comment", "--compare", str(path), *extra])


def test_sha_lookup_takes_a_pull_without_state_and_survives_a_404_fallback(tmp_path, fixtures_dir, monkeypatch, capsys):
    """The associated-pulls answer lacks `state` and /pulls answers 404: the PR is still found."""
    state = StubState(
        pulls=[{"number": 7, "head": {"sha": HEAD, "repo": {"full_name": "octo/kernels"}}}],
        associated={HEAD: [7]},
        not_found={"pulls"},
    )
    with GitHubStub(state) as gh:
        code = _comment(gh, tmp_path, fixtures_dir, monkeypatch, "--sha", HEAD)
    assert code == 0, capsys.readouterr().err
    assert len(state.comments[7]) == 1 and "created comment" in capsys.readouterr().out


def test_sha_lookup_with_nothing_found_and_a_404_is_not_an_error(tmp_path, fixtures_dir, monkeypatch, capsys):
    state = StubState(not_found={"pulls", f"commits/{HEAD}/pulls"})
    with GitHubStub(state) as gh:
        code = _comment(gh, tmp_path, fixtures_dir, monkeypatch, "--sha", HEAD)
    out = capsys.readouterr()
    assert code == 0 and "no open pull request" in out.out, out.err
    assert "404" in out.err and state.comments == {}


def test_a_closed_pull_is_still_not_commented_on(tmp_path, fixtures_dir, monkeypatch, capsys):
    state = StubState(pulls=[{"number": 8, "state": "closed", "head": {"sha": HEAD}}], associated={HEAD: [8]})
    with GitHubStub(state) as gh:
        assert _comment(gh, tmp_path, fixtures_dir, monkeypatch, "--sha", HEAD) == 0
    assert state.comments == {} and "no open pull request" in capsys.readouterr().out


# --- mentions and references, checked on the rendered comment --------------------------------------


def _visible_text(markdown: str) -> str:
    """What GitHub scans for mentions: the rendered HTML's text, code spans and blocks left out."""
    rendered = MarkdownIt("commonmark").enable("table").render(markdown)
    rendered = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", " ", rendered, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", rendered))


def test_untrusted_text_mentions_nobody_and_links_no_issue_once_rendered(fixtures_dir):
    report = make_report(fixtures_dir)
    hostile = "@octocat @everyone #12 &#64;team"
    case = dataclasses.replace(
        report.cases[0],
        correctness_failed=True,
        head=dataclasses.replace(report.cases[0].head, error=hostile, correct=False),
    )
    body = render_comment(dataclasses.replace(report, gpu_name="GPU of @someone #3", cases=[case, *report.cases[1:]]))
    text = _visible_text(body)
    assert "octocat" in text and "someone" in text  # the text is shown ...
    assert MENTION.findall(text) == [] and ISSUE_REF.findall(text) == []  # ... but pings and links nothing


# --- deep JSON -----------------------------------------------------------------------------------------

DEEP = "[" * 200_000 + "]" * 200_000


def test_deep_json_in_a_bundle_is_refused_naming_the_file(tmp_path, db_path, capsys):
    bundle = make_bundle(tmp_path / "b")
    (bundle / "outcomes.json").write_text(DEEP)
    assert cli_main(["--db", str(db_path), "ingest", str(bundle)]) == 2
    err = capsys.readouterr().err
    assert "outcomes.json" in err and "nested too deeply" in err and "Traceback" not in err
    assert not db_path.exists()


def test_deep_pytest_benchmark_and_compare_json_are_refused_naming_the_file(tmp_path, db_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"benchmarks": ' + DEEP + "}")
    assert cli_main(["--db", str(db_path), "ingest", str(deep)]) == 2
    assert "deep.json" in capsys.readouterr().err
    assert cli_main(["comment", "--compare", str(deep), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "deep.json" in err and "nested too deeply" in err


def test_json_just_deep_enough_to_parse_is_refused_too(tmp_path, db_path, capsys):
    nested = tmp_path / "nested.json"
    nested.write_text('{"benchmarks": [' + "[" * 500 + "]" * 500 + "]}")
    assert cli_main(["--db", str(db_path), "ingest", str(nested)]) == 2
    assert "nested 502 levels deep" in capsys.readouterr().err


# --- pytest-benchmark versions ------------------------------------------------------------------------


def _benchmark_file(path: Path, version: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "version": version,
                "datetime": "2026-11-01T08:00:00+00:00",
                "machine_info": {},
                "commit_info": {},
                "benchmarks": [
                    {
                        "name": "test_x",
                        "fullname": "t.py::test_x",
                        "group": None,
                        "params": None,
                        "stats": {
                            "min": 1e-3,
                            "max": 2e-3,
                            "mean": 1.5e-3,
                            "stddev": 1e-4,
                            "rounds": 5,
                            "median": 1.5e-3,
                            "iqr": 1e-4,
                            "q1": 1.4e-3,
                            "q3": 1.6e-3,
                            "iqr_outliers": 0,
                            "stddev_outliers": 0,
                            "outliers": "0;0",
                            "ld15iqr": 1e-3,
                            "hd15iqr": 2e-3,
                            "ops": 666.0,
                            "total": 7.5e-3,
                            "iterations": 1,
                        },
                        "options": {},
                        "extra_info": {},
                    }
                ],
            }
        )
    )
    return path


def test_an_unknown_pytest_benchmark_major_version_is_refused_by_name(tmp_path, db_path, capsys):
    future = _benchmark_file(tmp_path / "future.json", "99.0.0")
    assert cli_main(["--db", str(db_path), "ingest", str(future)]) == 2
    err = capsys.readouterr().err
    assert "future.json" in err and "version" in err and "99.0.0" in err
    assert not db_path.exists()
    current = _benchmark_file(tmp_path / "current.json", "5.2.3")
    assert cli_main(["--db", str(db_path), "--repo", "example/kernels", "ingest", str(current)]) == 0
    with open_read(parse_location(db_path)) as con:
        assert con.execute("SELECT count(*) FROM results").fetchone()[0] == 1


# --- ncu CSVs -----------------------------------------------------------------------------------------


def test_the_recorded_csv_has_no_unknown_columns():
    report = parse_ncu_csv(NCU_DATA / RAW)
    assert len(report.kernels) == 6 and report.unknown_columns == []


@pytest.mark.parametrize("cut", ["after the header", "after the units row", "mid-row"])
def test_a_truncated_csv_is_refused_not_read_as_fewer_kernels(tmp_path, cut):
    text = (NCU_DATA / RAW).read_text()
    header_end = text.index("\n", text.index('"ID"')) + 1
    keep = {
        "after the header": header_end,
        "after the units row": text.index("\n", header_end) + 1,
        "mid-row": len(text) - 40,
    }[cut]
    (tmp_path / RAW).write_text(text[:keep])
    with pytest.raises(NcuParseError, match="truncated") as info:
        parse_ncu_csv(tmp_path / RAW)
    assert RAW in str(info.value)


@pytest.mark.parametrize("cut", ["mid-row", "after the units row"])
def test_a_bundle_whose_ncu_csv_the_parser_refuses_is_refused_at_ingest(tmp_path, db_path, capsys, cut):
    """ncu_raw.csv used to be stored verbatim whatever it held; now it is read as the parser reads it."""
    text = (NCU_DATA / RAW).read_text()
    bundle = make_bundle(tmp_path / "bundle", run_id="ncu-cut", with_ncu=True)
    units_end = text.index("\n", text.index("\n", text.index('"ID"')) + 1) + 1
    (bundle / "ncu_raw.csv").write_text(text[: len(text) - 40] if cut == "mid-row" else text[:units_end])
    with pytest.raises(NcuParseError):  # the parser's own verdict on the same text
        parse_ncu_csv(bundle / "ncu_raw.csv")
    assert cli_main(["--db", str(db_path), "ingest", str(bundle)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "truncated" in err, err
    assert f"{bundle / 'ncu_raw.csv'}: line {len(text.splitlines()) if cut == 'mid-row' else ''}" in err, err
    assert not db_path.exists()


def test_joined_ncu_tables_are_ingested_and_the_writer_refuses_a_cut_one(tmp_path, db_path):
    """A pass over two variants joins two `ncu --import` outputs; each is read as a whole table."""
    from attnwatch.history.contract.bundle_writer import NcuFiles, write_ncu_files
    from attnwatch.history.errors import BundleError

    text = (NCU_DATA / RAW).read_text()
    bundle = make_bundle(tmp_path / "bundle", run_id="ncu-joined", with_ncu=True)
    (bundle / "ncu_raw.csv").write_text(text + "\n" + text)
    assert len(ingest_paths(parse_location(db_path), [bundle]).inserted) == 1
    out = tmp_path / "ncu-out"
    out.mkdir()
    with pytest.raises(BundleError) as info:
        write_ncu_files(out, NcuFiles("2025.3.1", [], [], raw_csv=text + "\n" + text[:-40]))
    assert info.value.path.endswith("ncu_raw.csv") and "truncated" in info.value.message
    assert list(out.iterdir()) == []


def test_an_unknown_metric_column_is_reported(tmp_path):
    rows = (NCU_DATA / RAW).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(rows) if line.startswith('"ID"'))
    for i in range(start, len(rows)):
        value = '"sm__future_counter.sum"' if i == start else '"1"'
        rows[i] = rows[i].rstrip("\n") + "," + value + "\n"
    (tmp_path / RAW).write_text("".join(rows))
    report = parse_ncu_csv(tmp_path / RAW)
    assert report.unknown_columns == ["sm__future_counter.sum"] and len(report.kernels) == 6
