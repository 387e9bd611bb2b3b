"""A DuckLake history whose data files live in an S3-compatible bucket: a real S3 server (moto's
server mode) on loopback, the catalog on the session's real PostgreSQL server (tests/pg_server.py).

The lake is created with ATTNWATCH_LAKE_DATA=s3://bucket/prefix and the standard AWS variables
(AWS_ENDPOINT_URL naming the loopback server), a bundle is ingested (twice: the second is a no-op),
the data is read back through user SQL, whose child process gets the caller's AWS variables and
reads the bucket with external access off, and the bucket holds the lake's Parquet files.
"""

from __future__ import annotations

import socket

import pytest

from bundle_factory import make_bundle
from attnwatch.history.store.db import open_read
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.lake import S3_EXTENSION, forget_shared
from attnwatch.history.store.location import parse_location
from attnwatch.history.sql.query import run_user_sql

moto_server = pytest.importorskip(
    "moto.server", reason="the S3 lake test needs moto's server mode: pip install 'moto[server]'"
)
boto3 = pytest.importorskip("boto3", reason="the S3 lake test needs boto3 (installed with moto)")
pytest.importorskip(
    S3_EXTENSION[1], reason="the S3 lake test needs DuckDB's httpfs extension: pip install attnwatch[lake-s3]"
)

BUCKET = "attnwatch-lake"
PREFIX = "attnwatch"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def s3_endpoint(monkeypatch):
    """A moto S3 server on a free loopback port, with one empty bucket; the AWS variables name it."""
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "attnwatch-test"),
        ("AWS_SECRET_ACCESS_KEY", "attnwatch-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint),
    ):
        monkeypatch.setenv(name, value)
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="attnwatch-test",
        aws_secret_access_key="attnwatch-secret",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:
        server.stop()


@pytest.fixture
def s3_lake(lake_db, s3_endpoint, monkeypatch) -> str:
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", f"s3://{BUCKET}/{PREFIX}")
    yield lake_db
    for read_only, config in ((True, None), (False, None)):  # this process's cached instances die with the server
        forget_shared(parse_location(lake_db), read_only, config)


def _objects(client) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/")
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_a_lake_keeps_its_data_in_an_s3_bucket(s3_lake, s3_endpoint, tmp_path, monkeypatch):
    bundle = make_bundle(tmp_path / "b", run_id="s3-run", n_samples=6, commit_sha="ef" * 20)
    assert [b.action for b in ingest_paths(parse_location(s3_lake), [bundle]).bundles] == ["inserted"]
    assert [b.action for b in ingest_paths(parse_location(s3_lake), [bundle]).bundles] == ["skipped"]

    with open_read(parse_location(s3_lake)) as con:
        assert con.execute("SELECT value FROM history.options() WHERE option_name = 'data_path'").fetchone() == (
            f"s3://{BUCKET}/{PREFIX}/",
        )
        assert con.execute("SELECT count(*) FROM results").fetchone() == (24,)

    parquet = [key for key in _objects(s3_endpoint) if key.endswith(".parquet")]
    assert any("/results/" in key for key in parquet) and any("/samples/" in key for key in parquet), parquet

    # A reader names the catalog alone; user SQL runs in a child with external access off and
    # reads the Parquet files from the bucket through the AWS variables it inherits.
    monkeypatch.delenv("ATTNWATCH_LAKE_DATA")
    frame = run_user_sql(parse_location(s3_lake), "SELECT count(*) AS n, count(DISTINCT run_id) AS runs FROM results")
    assert (frame.n.tolist(), frame.runs.tolist()) == ([24], [1])
    samples = run_user_sql(parse_location(s3_lake), "SELECT count(*) AS n FROM samples").n.tolist()
    assert samples == [24 * 6]
