"""`custody feeds`: collect until stopped, status, retrieve, delete; and a dropped hour ingested as any batch."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from assets.launch import instance_for
from governance import ledger
from governance.batches import mark_ready
from governance.errors import DuplicateBatch
from governance.feeds.store import FeedStore
from governance.ingest import ingest
from governance.runs import RunRequest
from tests.feed_server import running_feed_server
from tests.helpers import cli
from tests.test_feeds import (
    FEED,
    HOUR_START,
    KEY,
    archived,
    feed_spec,
    land,
    load,
    make_download,
    upload_archive,
)

ROOT = Path(__file__).resolve().parents[1]
CUSTODY = Path(sys.executable).with_name("custody")


@pytest.fixture
def feed_env(cli_env, tmp_path: Path, monkeypatch):
    """The CLI's environment with one feed spec, at a server on a loopback port."""
    with running_feed_server() as server:
        specs = feed_spec(tmp_path / "feed-specs", server.url("/changing") + "?key=${FEED_KEY}")
        monkeypatch.setenv("CUSTODY_SPECS", str(specs))
        monkeypatch.setenv("CUSTODY_SPECS_APPROVAL", "off")
        monkeypatch.setenv("FEED_KEY", "canary-51de2b")
        yield cli_env, server


def entries(catalog, action: str):
    with catalog.session() as session:
        return [e for e in ledger.entries(session) if e.action == action]


def test_sigterm_stops_collection_cleanly_and_loses_nothing(feed_env, tmp_path: Path):
    settings, server = feed_env
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from governance.command import main; main()",
            "feeds",
            "collect",
            "--json",
            "--replica",
            "east",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while server.hits.get("/changing", 0) < 5 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[0]["event"] == "started" and events[-1]["event"] == "stopped"
    kept = events[-1]["downloads"]
    assert kept >= 5
    store = FeedStore(settings.feeds_store)
    assert sum(len(names) for names in archived(store).values()) == kept
    assert not list((settings.feeds_workspace / "downloads").rglob("*.json"))
    assert "canary-51de2b" not in out + err


def test_a_collector_refused_at_start_is_recorded(feed_env, capsys, monkeypatch, catalog):
    monkeypatch.delenv("FEED_KEY")
    code, _, err = cli(capsys, "feeds", "collect")
    assert code == 1
    assert "error: market.prices: source.feed.url: the variable FEED_KEY is not set" in err
    assert [json.loads(e.details)["reason"] for e in entries(catalog, "feed.refused")] == [
        "market.prices: source.feed.url: the variable FEED_KEY is not set"
    ]


def test_status_retrieve_and_delete(feed_env, capsys, tmp_path: Path, catalog):
    settings, _ = feed_env
    store = FeedStore(settings.feeds_store)
    for hour in (HOUR_START, HOUR_START + timedelta(hours=1)):
        upload_archive(tmp_path, store, hour, [make_download(hour + timedelta(seconds=1), b'{"tick": 1, "price": 2}')])
    code, out, _ = cli(capsys, "feeds", "status", "--json")
    assert code == 0
    assert json.loads(out)["feeds"][0] | {"store_bytes": 0} == {
        "feed": "market/prices",
        "every": "200ms",
        "last_download": None,
        "failed_ticks": 0,
        "hours_archived": 2,
        "last_hour": "2026-11-23T15:00:00+00:00",
        "store_bytes": 0,
    }
    code, out, _ = cli(
        capsys,
        "feeds",
        "retrieve",
        "market/prices",
        "--from",
        "2026-11-23T14",
        "--to",
        "2026-11-23T16",
        "--to-dir",
        str(tmp_path / "got"),
    )
    assert (code, out.split(" ")[0]) == (0, "2")
    code, _, err = cli(
        capsys, "feeds", "delete", "market/prices", "--from", "2026-11-23T14", "--to", "2026-11-23T15", "--by", "bob"
    )
    assert code == 3 and "bob may not delete feed archives: it needs the admin group custody-admins" in err
    code, out, _ = cli(
        capsys,
        "feeds",
        "delete",
        "market/prices",
        "--from",
        "2026-11-23T14",
        "--to",
        "2026-11-23T15",
        "--by",
        "alice",
        password="alice-demo",
    )
    assert (code, out.strip().split(" ")[:2]) == (0, ["deleted", "1"])
    assert store.hours(FEED) == [HOUR_START + timedelta(hours=1)]
    decisions = [(e.actor, json.loads(e.details)["result"]) for e in entries(catalog, "feed.delete")]
    assert decisions == [("bob", "denied"), ("alice", "allowed")]
    assert json.loads(entries(catalog, "feed.deleted")[0].details)["archives"]


def test_a_dropped_hour_lands_as_a_version_labelled_with_the_hour(tmp_path: Path, spark, catalog, lake, settings):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    store = FeedStore(settings.feeds_store)
    bodies = [b'{"tick": %d, "price": %d}' % (i, 100 + i) for i in range(4)]
    upload_archive(
        tmp_path, store, HOUR_START, [make_download(HOUR_START + timedelta(minutes=i), b) for i, b in enumerate(bodies)]
    )
    dropped = land(store, lake, catalog, spec, datetime(2026, 11, 23, 16, tzinfo=UTC))
    row = ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=dropped[0].batch_id)
    assert (row.rows, row.rows_quarantined, row.label) == (4, 0, "2026-11-23T14")
    assert sorted(r.tick for r in spark.read.parquet(str(lake.at(row.path))).collect()) == [0, 1, 2, 3]


def test_two_hours_of_the_same_answers_both_land(tmp_path: Path, spark, catalog, lake, settings):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    store = FeedStore(settings.feeds_store)
    bodies = [b'{"tick": 1, "price": 100}', b'{"tick": 2, "price": 100}']
    for hour in (HOUR_START, HOUR_START + timedelta(hours=1)):
        upload_archive(
            tmp_path, store, hour, [make_download(hour + timedelta(minutes=i), b) for i, b in enumerate(bodies)]
        )
    dropped = land(store, lake, catalog, spec, datetime(2026, 11, 23, 17, tzinfo=UTC))
    rows = [
        ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=batch.batch_id) for batch in dropped
    ]
    assert [(row.number, row.label, row.rows) for row in rows] == [(1, "2026-11-23T14", 2), (2, "2026-11-23T15", 2)]


def ingested_hour(tmp_path: Path, spark, catalog, lake, settings, fmt: str = "json"):
    """One hour of one answer dropped and ingested; its spec and batch."""
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list", fmt=fmt))[KEY]
    upload_archive(
        tmp_path, FeedStore(settings.feeds_store), HOUR_START, [make_download(HOUR_START, b'{"tick": 1, "price": 100}')]
    )
    [dropped] = land(FeedStore(settings.feeds_store), lake, catalog, spec, datetime(2026, 11, 23, 16, tzinfo=UTC))
    ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=dropped.batch_id)
    return spec, dropped.batch_id


def test_an_hours_answers_dropped_again_are_the_same_files(tmp_path: Path, spark, catalog, lake, settings):
    spec, batch_id = ingested_hour(tmp_path, spark, catalog, lake, settings)
    shutil.copytree(lake.batch_dir(KEY, batch_id), lake.batch_dir(KEY, "2026-11-23T14_again"))
    mark_ready(lake.batch_dir(KEY, "2026-11-23T14_again"))
    with pytest.raises(DuplicateBatch, match=f"has the same files as batch '{batch_id}'"):
        ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id="2026-11-23T14_again")


def test_a_raw_feeds_answer_fetched_at_another_time_is_another_row(tmp_path: Path, spark, catalog, lake, settings):
    spec, batch_id = ingested_hour(tmp_path, spark, catalog, lake, settings, fmt="raw")
    again = lake.batch_dir(KEY, "2026-11-23T14_again")
    shutil.copytree(lake.batch_dir(KEY, batch_id), again)
    [download] = [path for path in again.iterdir() if not path.name.startswith("_")]
    later = make_download(HOUR_START + timedelta(minutes=5), download.read_bytes())[0]
    download.rename(again / later)
    mark_ready(again)
    row = ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=again.name)
    assert [r.file for r in spark.read.parquet(str(lake.at(row.path))).collect()] == [later]


def test_a_download_not_in_the_feeds_format_is_quarantined_and_the_rest_of_the_hour_lands(
    tmp_path: Path, spark, catalog, lake, settings
):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list", max_bad_fraction=0.5))[KEY]
    store = FeedStore(settings.feeds_store)
    downloads = [make_download(HOUR_START + timedelta(minutes=i), b'{"tick": %d, "price": 1}' % i) for i in range(3)]
    downloads.append(make_download(HOUR_START + timedelta(minutes=9), b"<html>502 Bad Gateway</html>"))
    upload_archive(tmp_path, store, HOUR_START, downloads)
    dropped = land(store, lake, catalog, spec, datetime(2026, 11, 23, 16, tzinfo=UTC))
    row = ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=dropped[0].batch_id)
    assert (row.rows, row.rows_quarantined) == (3, 1)
    [refused] = spark.read.json(str(lake.at(row.quarantine_path))).collect()
    assert refused.file.endswith(downloads[-1][0])


def test_a_raw_feed_lands_each_download_as_a_row_with_its_bytes(tmp_path: Path, spark, catalog, lake, settings):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list", fmt="raw"))[KEY]
    store = FeedStore(settings.feeds_store)
    bodies = [bytes([0, 255, 1, 2]) * 100, b"\x89PNG not really"]
    downloads = [
        make_download(HOUR_START + timedelta(minutes=i, milliseconds=250), body) for i, body in enumerate(bodies)
    ]
    upload_archive(tmp_path, store, HOUR_START, downloads)
    [dropped] = land(store, lake, catalog, spec, datetime(2026, 11, 23, 16, tzinfo=UTC))
    row = ingest(spark, catalog, lake, spec, RunRequest(requested_by="bob"), batch_id=dropped.batch_id)
    assert (row.rows, row.rows_quarantined) == (2, 0)
    landed = sorted(spark.read.parquet(str(lake.at(row.path))).collect(), key=lambda r: r.file)
    assert [(r.file, bytes(r.content), r.bytes) for r in landed] == [
        (name, body, len(body)) for name, body in downloads
    ]
    assert [r.sha256 for r in landed] == [hashlib.sha256(body).hexdigest() for body in bodies]
    assert landed[1].fetched_at.replace(tzinfo=UTC) == HOUR_START + timedelta(minutes=1, milliseconds=250)


def test_custody_ingest_lands_a_feeds_hour_in_its_partition_the_named_batch_or_the_oldest_ready(
    cli_env, tmp_path: Path, monkeypatch, catalog, lake, spark, capsys
):
    specs = feed_spec(tmp_path / "feed-specs", "https://prices.example/list")
    monkeypatch.setenv("CUSTODY_SPECS", str(specs))
    store = FeedStore(cli_env.feeds_store)
    for hour in (HOUR_START, HOUR_START + timedelta(hours=1)):
        upload_archive(tmp_path, store, hour, [make_download(hour + timedelta(minutes=1), b'{"tick": 1, "price": 2}')])
    _, newer = land(store, lake, catalog, load(specs)[KEY], HOUR_START + timedelta(hours=3))

    code, out, err = cli(capsys, "ingest", "market/prices", "--batch", newer.batch_id, "--as", "bob")
    assert code == 0 and "committed market/prices@1" in out, err
    code, out, err = cli(capsys, "ingest", "market/prices", "--as", "bob")
    assert code == 0 and "committed market/prices@2" in out, err

    assert [(v.number, v.label) for v in catalog.versions(KEY)] == [(1, "2026-11-23T15"), (2, "2026-11-23T14")]
    with instance_for(cli_env) as instance:
        partitions = instance.get_materialized_partitions(dg.AssetKey(["market", "prices"]))
    assert partitions == {"2026-11-23-14:00", "2026-11-23-15:00"}


def test_custody_ingest_of_a_feed_refuses_a_batch_named_for_no_hour(cli_env, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("CUSTODY_SPECS", str(feed_spec(tmp_path / "feed-specs", "https://prices.example/list")))
    code, _, err = cli(capsys, "ingest", "market/prices", "--batch", "prices-of-monday", "--as", "bob")
    assert code == 1
    assert (
        "error: batch 'prices-of-monday' of market/prices holds no hour of the feed since 2026-11-01T00: "
        "a feed's batches are named <yyyy-mm-ddThh>_<hash>"
    ) in err


def collecting(replica: str) -> tuple[subprocess.Popen, dict]:
    """`custody feeds collect --replica REPLICA` started, and its first event once it printed one."""
    process = subprocess.Popen(
        [str(CUSTODY), "feeds", "collect", "--json", "--replica", replica],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline()
    return process, json.loads(line) if line else {"event": "ended", "error": process.communicate()[1]}


def test_a_collector_restarted_at_once_after_a_kill_takes_its_replica_name_back(feed_env, catalog):
    killed, first = collecting("r1")
    assert first["event"] == "started", first
    os.kill(killed.pid, signal.SIGKILL)
    killed.communicate()

    restarted, event = collecting("r1")
    assert event["event"] == "started", event
    restarted.send_signal(signal.SIGTERM)
    _, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    assert entries(catalog, "feed.refused") == []
