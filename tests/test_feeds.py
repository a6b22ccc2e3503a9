"""Feeds (seed 001's Hoard): collection into hourly archives, consolidation of replicas' archives,
retrieval by time, and each complete hour landing as a governed batch."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from governance.batches import batch_meta, ready_batches
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import EnvironmentProblem, InvalidInput, SpecError
from governance.feeds.archive import ArchiveProblem, pack
from governance.feeds.collector import Collector, plan_feeds
from governance.feeds.consolidate import consolidate
from governance.feeds.names import (
    archive_name,
    content_hash,
    download_name,
    feed_id,
    hour_of,
    parse_download,
)
from governance.feeds.replicas import claim, new_lease
from governance.feeds.retrieve import retrieve
from governance.feeds.store import S3_ENDPOINT, FeedStore
from governance.feeds.templates import fill_request
from governance.feeds.tend import tend
from governance.feeds.workspace import Workspace
from governance.spec import load_specs
from governance.zones import AssetKey
from tests.feed_server import running_feed_server
from tests.s3_server import CREDENTIALS, running_s3

HOUR_START = datetime(2026, 11, 23, 14, tzinfo=UTC)
KEY = AssetKey("market", "prices")
FEED = "market.prices"


def feed_spec(
    folder: Path,
    url: str,
    *,
    every: str = "200ms",
    headers: dict | None = None,
    name: str = "prices",
    extra: dict | None = None,
    max_bad_fraction: float = 0.01,
    fmt: str = "json",
) -> Path:
    body = {
        "description": "Prices, polled.",
        "roles": {"owner": "sales-owners", "producer": "sales-producers", "consumer": "sales-consumers"},
        "zone": "landing",
        "source": {
            "format": fmt,
            "multiline": fmt == "json",
            "feed": {
                "url": url,
                "every": every,
                "requested_by": "bob",
                "postfix": ".json",
                "timeout": 1,
                "start": "2026-11-01T00",
                "max_bytes": 1000,
                **({"headers": headers} if headers else {}),
                **(extra or {}),
            },
        },
        "columns": [] if fmt == "raw" else [{"name": "tick", "type": "long"}, {"name": "price", "type": "long"}],
        "max_bad_fraction": max_bad_fraction,
    }
    (folder / "market").mkdir(parents=True, exist_ok=True)
    (folder / "market" / f"{name}.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")
    return folder


def load(folder: Path):
    return load_specs(folder, transform_packages=DEFAULT_TRANSFORM_PACKAGES)


@pytest.fixture
def feed_server():
    with running_feed_server() as server:
        yield server


@pytest.fixture(scope="session")
def s3_server():
    with running_s3() as server:
        yield server


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FeedStore:
    """A folder store, then the same test on an S3-compatible server in its own bucket."""
    if request.param == "folder":
        return FeedStore((tmp_path / "store").as_uri())
    server = request.getfixturevalue("s3_server")
    for name, value in {**CREDENTIALS, S3_ENDPOINT: server.endpoint}.items():
        monkeypatch.setenv(name, value)
    bucket = f"feeds-{uuid.uuid4().hex[:12]}"
    store = FeedStore(f"s3://{bucket}/archive")
    store.fs.mkdir(bucket)
    return store


def shifted(start: datetime):
    """A clock that reads `start` now and runs on from it in real time."""
    offset = start - datetime.now(UTC)
    return lambda: datetime.now(UTC) + offset


def collect(
    specs, workspace: Workspace, store: FeedStore, seconds: float, *, now=None, environ=None, until=None
) -> Collector:
    """Run a collector for `seconds`; with `until`, only until its status satisfies it, within them."""
    collector = Collector(plan_feeds(list(specs), environ or {}), workspace, store, now=now or shifted(HOUR_START))
    stop = threading.Event()
    if until is None:
        threading.Timer(seconds, stop.set).start()
    else:
        threading.Thread(target=_stop_when, args=(collector, until, seconds, stop), daemon=True).start()
    collector.run(stop)
    return collector


def _stop_when(collector: Collector, until, seconds: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until(collector.status()):
        time.sleep(0.05)
    stop.set()


def archived(store: FeedStore, feed: str = FEED) -> dict[datetime, list[str]]:
    """Every download in the store, by hour: each archive's members."""
    found = {}
    for hour in store.hours(feed):
        for stored in store.archives(feed, hour):
            with tarfile.open(fileobj=io.BytesIO(store.fs.cat_file(stored.key)), mode="r:gz") as tar:
                found.setdefault(hour, []).extend(tar.getnames())
    return found


def land(store: FeedStore, lake, catalog, spec, now: datetime):
    """What the custody_feeds sensor does at `now`: the hours it drops into the DropZone."""
    return list(tend(store, [spec], lake.root / "feed-work", now, lake=lake, catalog=catalog).dropped)


def make_download(at: datetime, body: bytes, feed: str = FEED) -> tuple[str, bytes]:
    return download_name(feed, at, content_hash(body), ".json"), body


def upload_archive(tmp_path: Path, store: FeedStore, hour: datetime, downloads: list[tuple[str, bytes]]) -> str:
    folder = tmp_path / f"pack-{len(list(tmp_path.glob('pack-*')))}"
    folder.mkdir()
    for name, body in downloads:
        (folder / name).write_bytes(body)
    packed = pack(list(folder.iterdir()), tmp_path / f"{folder.name}.tar.gz")
    name = archive_name(FEED, hour, packed.digest)
    store.put(packed.path, FEED, hour, name)
    return name


# Names and templates


def test_a_download_is_named_by_feed_utc_time_to_the_millisecond_and_content_hash():
    body = b'{"price": 1}'
    name = download_name(FEED, datetime(2026, 11, 23, 14, 5, 1, 123456, tzinfo=UTC), content_hash(body), ".json")
    expected_hash = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).decode()[:20]
    assert name == f"market.prices_20261123T140501.123_{expected_hash}.json"
    assert parse_download(name).hour == datetime(2026, 11, 23, 14, tzinfo=UTC)


def test_an_archive_is_named_by_feed_hour_and_its_own_hash():
    assert archive_name(FEED, HOUR_START, "A" * 20) == "market.prices_20261123T14_AAAAAAAAAAAAAAAAAAAA.tar.gz"


def test_a_template_takes_values_from_the_environment_and_masks_them():
    filled = fill_request("https://h/p?key=${KEY}", {"X-Token": "Bearer ${TOKEN}"}, {"KEY": "k1", "TOKEN": "t2"}, FEED)
    assert filled.url == "https://h/p?key=k1"
    assert filled.headers == (("X-Token", "Bearer t2"),)
    assert filled.mask("failed for https://h/p?key=k1 with t2") == "failed for https://h/p?key=*** with ***"


def test_a_template_naming_an_unset_variable_is_refused_by_name():
    with pytest.raises(InvalidInput, match=r"market.prices: source.feed.url: the variable PRICES_KEY is not set"):
        fill_request("https://h/p?key=${PRICES_KEY}", {}, {}, FEED)


def test_a_header_that_would_inject_a_line_is_refused():
    with pytest.raises(InvalidInput, match=r"source.feed.headers.X-Token holds a line break"):
        fill_request("https://h/", {"X-Token": "${TOKEN}"}, {"TOKEN": "a\r\nX-Admin: yes"}, FEED)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://prices.example/list", "source.feed.url: must be an http:// or https:// URL"),
        ("${HOST}/list", "source.feed.url: must be an http:// or https:// URL"),
    ],
)
def test_a_feed_url_that_is_not_http_is_refused_in_the_spec(tmp_path: Path, url: str, message: str):
    with pytest.raises(SpecError, match=message):
        load(feed_spec(tmp_path / "specs", url))


def test_raw_is_for_feeds_and_its_columns_are_fixed(tmp_path: Path):
    folder = feed_spec(tmp_path / "specs", "https://x/", fmt="raw")
    body = yaml.safe_load((folder / "market" / "prices.yaml").read_text())
    body["columns"] = [{"name": "tick", "type": "long"}]
    (folder / "market" / "prices.yaml").write_text(yaml.safe_dump(body))
    with pytest.raises(SpecError, match=r"a raw feed's columns are fixed \(file, fetched_at, bytes, sha256, content\)"):
        load(folder)
    del body["source"]["feed"], body["columns"]
    (folder / "market" / "prices.yaml").write_text(yaml.safe_dump(body))
    with pytest.raises(SpecError, match=r"raw is for a feed's downloads: declare source.feed"):
        load(folder)


def test_a_feed_period_must_be_a_duration(tmp_path: Path):
    with pytest.raises(SpecError, match=r"source.feed.every: '5 s' is not a duration"):
        load(feed_spec(tmp_path / "specs", "https://x/", every="5 s"))


# Collection


def test_collection_keeps_changing_downloads_by_hour_across_the_boundary(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/changing")))
    start = HOUR_START + timedelta(hours=1) - timedelta(seconds=1)
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 2.0, now=shifted(start))
    counts = collector.status()[FEED]
    found = archived(store)
    assert sorted(found) == [HOUR_START, HOUR_START + timedelta(hours=1)]
    names = [name for members in found.values() for name in members]
    assert len(names) == counts["downloads"] >= 8
    assert all(parse_download(name).hour == hour for hour, members in found.items() for name in members)
    assert not list((tmp_path / "ws" / "downloads").rglob("*.json")), "the workspace keeps nothing after a clean stop"


def test_a_download_identical_to_the_one_before_is_skipped(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/same")))
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 1.2)
    counts = collector.status()[FEED]
    assert counts["downloads"] == 1
    assert counts["unchanged"] >= 3
    assert sum(len(m) for m in archived(store).values()) == 1


def test_a_failed_download_is_retried_within_its_period_and_counted(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/error"), every="5s"))
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 2.0)
    counts = collector.status()[FEED]
    assert (counts["downloads"], counts["failed_attempts"], counts["failed_ticks"]) == (0, 3, 1)
    assert counts["last_error"].endswith("HTTP 500 Internal Server Error")


def test_a_feed_failing_tick_after_tick_waits_longer_each_time_and_the_collector_goes_on(
    tmp_path: Path, feed_server, store
):
    folder = feed_spec(tmp_path / "specs", feed_server.url("/error"))
    feed_spec(folder, feed_server.url("/changing"), name="good")
    collector = collect(load(folder), Workspace(tmp_path / "ws"), store, 1.5)
    status = collector.status()
    assert status[FEED]["failed_ticks"] >= 2
    assert status[FEED]["paused"] >= 1
    assert status["market.good"]["downloads"] >= 5


def test_a_slow_response_times_out_and_a_large_one_is_refused(tmp_path: Path, feed_server, store):
    folder = feed_spec(tmp_path / "specs", feed_server.url("/slow"), every="2s")
    feed_spec(folder, feed_server.url("/big"), name="big", every="1s")
    collector = collect(load(folder), Workspace(tmp_path / "ws"), store, 1.2)
    status = collector.status()
    assert "took longer than 1s" in status[FEED]["last_error"] or "no answer within 1s" in status[FEED]["last_error"]
    assert "over max_bytes 1,000" in status["market.big"]["last_error"]
    assert status["market.big"]["downloads"] == 0


def test_a_body_trickling_in_is_cut_off_at_the_timeout(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/drip"), every="10s"))
    started = time.monotonic()
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 0.5)
    assert time.monotonic() - started < 6, "the stop waited for the trickle, not for the timeout"
    assert collector.status()[FEED]["last_error"].endswith("the body took longer than 1s")


def test_a_redirect_is_not_followed_so_no_header_goes_elsewhere(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/redirect"), every="5s", headers={"X-Key": "${KEY}"}))
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 0.5, environ={"KEY": "secret-value-1"})
    assert "HTTP 302: a redirect, not followed" in collector.status()[FEED]["last_error"]


def test_an_empty_body_is_counted_not_kept(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/empty")))
    # Until three polls came back empty, however long a loaded machine takes to make them.
    counts = collect(specs, Workspace(tmp_path / "ws"), store, 30, until=lambda s: s[FEED]["empty"] >= 3).status()[FEED]
    assert (counts["downloads"], counts["failed_ticks"]) == (0, 0)
    assert counts["empty"] >= 3


def test_a_body_not_in_the_declared_format_is_kept_for_ingestion_to_judge(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/notjson")))
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 30, until=lambda s: s[FEED]["downloads"] >= 2)
    assert collector.status()[FEED]["downloads"] >= 2
    assert sum(len(m) for m in archived(store).values()) == collector.status()[FEED]["downloads"]


def test_a_canary_secret_reaches_the_server_and_nowhere_else(tmp_path: Path, feed_server, store):
    canary = "canary-7f3e9a1c55"
    specs = load(
        feed_spec(
            tmp_path / "specs", feed_server.url("/error") + "?key=${FEED_KEY}", headers={"X-Token": "${FEED_TOKEN}"}
        )
    )
    environ = {"FEED_KEY": canary, "FEED_TOKEN": canary + "-token"}
    collector = collect(specs, Workspace(tmp_path / "ws"), store, 1.0, environ=environ)
    assert any(h.get("X-Token") == canary + "-token" for h in feed_server.headers_seen)
    shown = json.dumps(collector.status())
    assert canary not in shown
    for path in tmp_path.rglob("*"):
        if path.is_file() and "specs" not in path.parts:
            assert canary.encode() not in path.read_bytes(), path


# Archives and consolidation


def test_consolidation_merges_replicas_archives_into_one_with_every_download_once(tmp_path: Path, store):
    downloads = [make_download(HOUR_START + timedelta(seconds=i), f'{{"tick": {i}}}'.encode()) for i in range(30)]
    for replica, part in enumerate((downloads[:20], downloads[10:], downloads[5:25])):
        upload_archive(tmp_path, store, HOUR_START, part)
    assert len(store.archives(FEED, HOUR_START)) == 3
    done = consolidate(store, FEED, HOUR_START, tmp_path)
    assert done.rounds == 1
    assert [s.archive.name for s in store.archives(FEED, HOUR_START)] == [done.archive.archive.name]
    assert archived(store)[HOUR_START] == sorted(name for name, _ in downloads)


def test_consolidators_running_at_once_lose_and_duplicate_nothing(tmp_path: Path, store):
    downloads = [make_download(HOUR_START + timedelta(seconds=i), f'{{"tick": {i}}}'.encode()) for i in range(60)]
    for start in range(0, 60, 12):
        upload_archive(tmp_path, store, HOUR_START, downloads[start : start + 18])
    for index in range(3):
        (tmp_path / f"c{index}").mkdir()
    with ThreadPoolExecutor(max_workers=3) as pool:
        merges = [pool.submit(consolidate, store, FEED, HOUR_START, tmp_path / f"c{index}") for index in range(3)]
    for merge in merges:
        merge.result()
    consolidate(store, FEED, HOUR_START, tmp_path)
    assert len(store.archives(FEED, HOUR_START)) == 1
    assert archived(store)[HOUR_START] == sorted(name for name, _ in downloads)


def test_two_collectors_and_concurrent_consolidation_keep_every_download_once(tmp_path: Path, feed_server, store):
    specs = load(feed_spec(tmp_path / "specs", feed_server.url("/changing")))
    collectors = [
        Collector(plan_feeds(list(specs), {}), Workspace(tmp_path / f"ws{i}"), store, now=shifted(HOUR_START))
        for i in range(2)
    ]
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,)) for c in collectors]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    kept = sum(c.status()[FEED]["downloads"] for c in collectors)
    merging = [threading.Thread(target=consolidate, args=(store, FEED, HOUR_START, tmp_path)) for _ in range(2)]
    for thread in merging:
        thread.start()
    for thread in merging:
        thread.join()
    consolidate(store, FEED, HOUR_START, tmp_path)
    names = archived(store)[HOUR_START]
    assert len(store.archives(FEED, HOUR_START)) == 1
    assert len(names) == len(set(names)) == kept


def hostile_archive(store: FeedStore, tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> None:
    path = tmp_path / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    store.put(path, FEED, HOUR_START, archive_name(FEED, HOUR_START, "h" * 20))


def regular(name: str, data: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info


def link(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return info


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (regular("../escaped.json", b"{}"), "is a path, not a download's name"),
        (regular("/tmp/absolute.json", b"{}"), "is a path, not a download's name"),
        (link(make_download(HOUR_START, b"{}")[0]), "is not a regular file"),
        (regular(make_download(HOUR_START, b"{}")[0], b"{tampered}"), "does not match the hash in its name"),
        (
            regular(make_download(HOUR_START + timedelta(hours=2), b"{}")[0], b"{}"),
            "is not a download of market.prices in the hour 2026-11-23T14",
        ),
    ],
)
def test_a_hostile_archive_is_refused_by_consolidation_and_retrieval_and_nothing_is_written(
    tmp_path: Path, store, member, problem
):
    name, body = make_download(HOUR_START + timedelta(seconds=1), b'{"ok": 1}')
    upload_archive(tmp_path, store, HOUR_START, [(name, body)])
    hostile_archive(store, tmp_path, member, b"{tampered}" if "hash" in problem else b"{}")
    before = sorted(s.archive.name for s in store.archives(FEED, HOUR_START))
    with pytest.raises(ArchiveProblem, match=problem):
        consolidate(store, FEED, HOUR_START, tmp_path)
    assert sorted(s.archive.name for s in store.archives(FEED, HOUR_START)) == before
    target = tmp_path / "out" / "inner"
    with pytest.raises(ArchiveProblem, match=problem):
        retrieve(store, FEED, HOUR_START, HOUR_START + timedelta(hours=1), target)
    assert not (tmp_path / "out" / "escaped.json").exists()
    assert not list(target.rglob("*.json")) or all(p.name == name for p in target.rglob("*.json"))


def test_an_object_that_is_not_a_tar_gz_is_refused_by_name(tmp_path: Path, store):
    upload_archive(tmp_path, store, HOUR_START, [make_download(HOUR_START, b"{}")])
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is not gzip")
    store.put(junk, FEED, HOUR_START, archive_name(FEED, HOUR_START, "j" * 20))
    with pytest.raises(
        ArchiveProblem, match=r"market.prices_20261123T14_jjjjjjjjjjjjjjjjjjjj.tar.gz is not a readable tar.gz"
    ):
        consolidate(store, FEED, HOUR_START, tmp_path)
    assert len(store.archives(FEED, HOUR_START)) == 2


# Retrieval


def test_retrieval_of_a_range_spanning_days_rounds_to_whole_hours(tmp_path: Path, store):
    hours = [datetime(2026, 11, 23, 22, tzinfo=UTC) + timedelta(hours=i) for i in range(4)]  # 22, 23, 00, 01
    for hour in hours:
        upload_archive(
            tmp_path, store, hour, [make_download(hour + timedelta(minutes=5), f'{{"h": "{hour}"}}'.encode())]
        )
    got = retrieve(
        store,
        FEED,
        datetime(2026, 11, 23, 23, 30, tzinfo=UTC),
        datetime(2026, 11, 24, 0, 10, tzinfo=UTC),
        tmp_path / "out",
    )
    assert (got.hours, got.files) == (2, 2)
    assert sorted(p.relative_to(tmp_path / "out").parent.as_posix() for p in (tmp_path / "out").rglob("*.json")) == [
        "market.prices/2026/11/23/23",
        "market.prices/2026/11/24/00",
    ]
    flat = retrieve(store, FEED, hours[0], hours[-1] + timedelta(minutes=1), tmp_path / "flat", collapse=True)
    assert flat.files == 4
    assert len(list((tmp_path / "flat").glob("*.json"))) == 4


# Replicas


def test_a_second_collector_under_the_same_replica_name_is_refused(store):
    claim(store, new_lease("east", "first"), datetime.now(UTC), {})
    with pytest.raises(
        EnvironmentProblem, match=r"replica east is already collecting .*give each collector its own --replica name"
    ):
        claim(store, new_lease("east", "second"), datetime.now(UTC), {})
    claim(store, new_lease("west", "third"), datetime.now(UTC), {})


def test_a_replica_name_whose_pid_now_runs_a_process_started_after_it_is_free(store):
    this = new_lease("east", "first")
    with subprocess.Popen(["sleep", "60"]) as later:
        try:
            # The record of a collector whose pid the kernel gave since to `later`.
            claim(store, replace(this, pid=later.pid, pid_started=this.pid_started), datetime.now(UTC), {})
            claim(store, new_lease("east", "second"), datetime.now(UTC), {})
        finally:
            later.kill()


def test_a_replica_whose_clock_is_off_from_the_stores_is_refused(store):
    with pytest.raises(EnvironmentProblem, match=r"replica east: this clock is \+30[01]s from the feed store's"):
        claim(store, new_lease("east", "first"), datetime.now(UTC) + timedelta(minutes=5), {})


# Complete hours become batches


def test_a_complete_hour_is_dropped_once_as_a_ready_batch_for_the_feeds_producer(tmp_path: Path, store, catalog, lake):
    specs = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))
    spec = specs[KEY]
    upload_archive(
        tmp_path,
        store,
        HOUR_START,
        [make_download(HOUR_START + timedelta(seconds=i), b'{"tick": %d}' % i) for i in range(3)],
    )
    assert land(store, lake, catalog, spec, HOUR_START + timedelta(minutes=62)) == []  # still settling
    later = HOUR_START + timedelta(hours=2)
    dropped = land(store, lake, catalog, spec, later)
    assert [(d.batch_id.split("_")[0], d.files) for d in dropped] == [("2026-11-23T14", 3)]
    assert ready_batches(lake, KEY) == [dropped[0].batch_id]
    meta = batch_meta(lake, KEY, dropped[0].batch_id)
    assert (meta.requested_by, meta.label) == ("bob", "2026-11-23T14")
    assert land(store, lake, catalog, spec, later) == []


def test_a_late_archive_makes_the_hour_come_again_as_a_new_batch(tmp_path: Path, store, catalog, lake):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    upload_archive(tmp_path, store, HOUR_START, [make_download(HOUR_START, b'{"tick": 1}')])
    later = HOUR_START + timedelta(hours=2)
    first = land(store, lake, catalog, spec, later)
    upload_archive(tmp_path, store, HOUR_START, [make_download(HOUR_START + timedelta(minutes=59), b'{"tick": 2}')])
    consolidate(store, FEED, HOUR_START, tmp_path)
    second = land(store, lake, catalog, spec, later)
    assert len(first) == len(second) == 1
    assert first[0].batch_id != second[0].batch_id
    assert second[0].files == 2
    assert ready_batches(lake, KEY) == [second[0].batch_id], "the first batch, a part of the second, is no longer ready"
    assert lake.batch_dir(KEY, first[0].batch_id).is_dir()


def test_an_hour_before_the_feeds_start_is_not_dropped(tmp_path: Path, store, catalog, lake):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    before = spec.feed.first_hour - timedelta(hours=3)
    upload_archive(tmp_path, store, before, [make_download(before, b'{"tick": 1}')])
    assert land(store, lake, catalog, spec, HOUR_START) == []


def test_the_same_answer_fetched_by_two_replicas_lands_once(tmp_path: Path, store, catalog, lake):
    spec = load(feed_spec(tmp_path / "specs", "https://prices.example/list"))[KEY]
    answers = [b'{"tick": 1}', b'{"tick": 1}', b'{"tick": 2}', b'{"tick": 2}', b'{"tick": 1}']
    upload_archive(
        tmp_path,
        store,
        HOUR_START,
        [make_download(HOUR_START + timedelta(seconds=i), body) for i, body in enumerate(answers)],
    )
    [dropped] = land(store, lake, catalog, spec, HOUR_START + timedelta(hours=2))
    assert dropped.files == 3, "a repeat of the answer just before is the same answer; a later return to it is not"
    assert "2 repeated answers of replicas left out" in batch_meta(lake, KEY, dropped.batch_id).note


def test_a_member_over_max_bytes_is_refused_unread(tmp_path: Path, store):
    upload_archive(tmp_path, store, HOUR_START, [make_download(HOUR_START, b"x" * 2000)])
    upload_archive(tmp_path, store, HOUR_START, [make_download(HOUR_START + timedelta(seconds=1), b"{}")])
    with pytest.raises(ArchiveProblem, match=r"is 2,000 bytes, over max_bytes 1,000"):
        consolidate(store, FEED, HOUR_START, tmp_path, max_bytes=1000)


def test_hour_of_is_utc():
    assert hour_of(datetime(2026, 11, 23, 15, 30, tzinfo=UTC).astimezone()) == datetime(2026, 11, 23, 15, tzinfo=UTC)


def test_feed_id_joins_domain_and_name():
    assert feed_id(KEY) == FEED
