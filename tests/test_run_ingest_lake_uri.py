"""`attnwatch run --ingest` into a lake named in PostgreSQL's URI form.

The command used to wrap the history location in `Path()`, which folds `//` to `/`:
`ducklake:postgres:postgresql://u@h:p/db` became `…postgresql:/u@h:p/db`, a connection string
PostgreSQL cannot read, after the whole run had been measured. The location is now handed on as
the user gave it (history.store.location parses it once)."""

from __future__ import annotations

from attnwatch.cli.main import main
from attnwatch.history.store.db import open_read
from pg_server import SUPERUSER
from attnwatch.history.store.location import parse_location


def test_run_ingests_into_a_lake_given_as_a_uri(postgres_server, tmp_path, monkeypatch, capsys):
    name = postgres_server.create_database("lake_uri_run")
    uri = f"ducklake:postgres:postgresql://{SUPERUSER}@127.0.0.1:{postgres_server.port}/{name}"
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", str(tmp_path / "lake-data"))
    monkeypatch.setenv("ATTNWATCH_REPO", "example/kernels")
    rc = main(
        [
            "--db",
            uri,
            "run",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa_math",
            "--dtypes",
            "fp16",
            "--out",
            str(tmp_path / "bundle"),
            "--time-cap",
            "0.2",
            "--no-progress",
            "--no-correctness",
            "--ingest",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert f"ingested into {uri}" in capsys.readouterr().out
    with open_read(parse_location(uri)) as con:
        assert con.execute("SELECT count(*) FROM results WHERE variant = 'sdpa_math'").fetchone()[0] > 0
