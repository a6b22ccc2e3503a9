#!/usr/bin/env python
"""One feed hour: consolidating three replicas' archives, then landing the hour, governed vs bare.

Makes an hour of downloads as three replicas would (each polls every second at its own offset, so
3 x 3,600 downloads of a JSON price list), packs each replica's hour into an archive and uploads the
three to a store. Then:

  consolidation  the hashed-object merge of the three archives, on a folder store and on moto's
                 S3 server (started here on a loopback port): time, and bytes read and written
                 against the archives' sizes
  ingestion      the consolidated hour dropped as a batch and landed, interleaved with a bare
                 spark.read.json(files).write.parquet(out) of the same files; medians and the ratio
                 governed/bare with its 90% bootstrap interval

    .venv/bin/python benchmarks/feed_hour.py --runs 0        # consolidation of 3 x 3,600 downloads
    .venv/bin/python benchmarks/feed_hour.py --per-replica 400 --runs 3   # and landing an hour of 1,200 downloads
    .venv/bin/python benchmarks/feed_hour.py --per-replica 100 --runs 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml

from benchmarks.session import custody_session
from benchmarks.stats import interval
from governance.catalog import Catalog
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.feeds.archive import pack
from governance.feeds.consolidate import consolidate
from governance.feeds.hours import drop_hour
from governance.feeds.names import archive_name, content_hash, download_name
from governance.feeds.store import S3_ENDPOINT, FeedStore
from governance.ingest import ingest
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.zones import AssetKey, Lake
from tests.s3_server import CREDENTIALS, running_s3

HOUR = datetime(2026, 11, 23, 14, tzinfo=UTC)
FEED = "bench.prices"
KEY = AssetKey("bench", "prices")
ITEMS = 50
COLUMNS = [("sku", "string"), ("price", "double"), ("tick", "long"), ("replica", "int")]


def price_list(replica: int, tick: int, rng: random.Random) -> bytes:
    items = [
        {"sku": f"SKU-{i:04d}", "price": round(rng.uniform(1, 500), 2), "tick": tick, "replica": replica}
        for i in range(ITEMS)
    ]
    return json.dumps(items).encode()


def replica_archives(work: Path, per_replica: int) -> list[Path]:
    rng = random.Random(7)
    archives = []
    for replica in range(3):
        folder = work / f"replica-{replica}"
        folder.mkdir()
        offset = timedelta(milliseconds=150 + 270 * replica)
        for tick in range(per_replica):
            body = price_list(replica, tick, rng)
            at = HOUR + offset + timedelta(seconds=tick * 3600 / per_replica)
            (folder / download_name(FEED, at, content_hash(body), ".json")).write_bytes(body)
        packed = pack(list(folder.iterdir()), work / f"replica-{replica}.tar.gz")
        archives.append(packed.path.rename(work / archive_name(FEED, HOUR, packed.digest)))
        shutil.rmtree(folder)
    return archives


def consolidate_on(store: FeedStore, archives: list[Path], work: Path) -> dict[str, float]:
    for path in archives:
        store.put(path, FEED, HOUR, path.name)
    started = time.perf_counter()
    done = consolidate(store, FEED, HOUR, work)
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "inputs": sum(p.stat().st_size for p in archives),
        "read": done.bytes_read,
        "written": done.bytes_written,
        "merged": done.archive.bytes,
        "rounds": done.rounds,
    }


def print_merges(merges: dict[str, dict[str, float]], per_replica: int) -> None:
    print(f"consolidation of one hour: {3 * per_replica:,} downloads from 3 replicas", flush=True)
    for name, merge in merges.items():
        print(
            f"  {name:<10} {merge['seconds']:6.2f}s, {merge['rounds']:.0f} round; read {merge['read'] / 1e6:.2f} MB "
            f"(the archives: {merge['inputs'] / 1e6:.2f} MB, x{merge['read'] / merge['inputs']:.2f}); "
            f"wrote {merge['written'] / 1e6:.2f} MB (the merged archive: {merge['merged'] / 1e6:.2f} MB)",
            flush=True,
        )


def spec_folder(work: Path) -> Path:
    body = {
        "description": "Benchmark feed.",
        "zone": "landing",
        "roles": {"owner": "bench-owners", "producer": "bench-producers", "consumer": "bench-consumers"},
        "source": {
            "format": "json",
            "multiline": True,
            "feed": {
                "url": "https://prices.example/list",
                "every": "1s",
                "requested_by": "bench",
                "start": "2026-11-01T00",
            },
        },
        "columns": [{"name": n, "type": t, "nullable": False} for n, t in COLUMNS],
        "max_bad_fraction": 0.0,
    }
    (work / "specs" / "bench").mkdir(parents=True)
    (work / "specs" / "bench" / "prices.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")
    return work / "specs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-replica", type=int, default=3600, help="downloads each replica kept in the hour")
    parser.add_argument("--runs", type=int, default=5, help="timed ingestion runs of each path (0: consolidation only)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="feed-hour-bench-") as tmp:
        work = Path(tmp)
        archives = replica_archives(work, args.per_replica)
        print(
            f"3 replicas x {args.per_replica:,} downloads of {ITEMS} prices; archives "
            f"{', '.join(f'{p.stat().st_size / 1e6:.2f}' for p in archives)} MB",
            flush=True,
        )
        folder_store = FeedStore((work / "store").as_uri())
        merges = {"folder": consolidate_on(folder_store, archives, work)}
        with running_s3() as server:
            os.environ.update({**CREDENTIALS, S3_ENDPOINT: server.endpoint})
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            s3 = FeedStore(f"s3://{bucket}/feeds")
            s3.fs.mkdir(bucket)
            merges["s3 (moto)"] = consolidate_on(s3, archives, work)

        print_merges(merges, args.per_replica)
        if not args.runs:
            return
        spec = load_specs(spec_folder(work), transform_packages=DEFAULT_TRANSFORM_PACKAGES)[KEY]
        settings = Settings.under(work / "home")
        lake, catalog = Lake(settings.lake), Catalog.from_url(settings.catalog_url)
        spark = custody_session()
        bare_out = work / "bare"
        files = None
        runs: dict[str, list[float]] = {"bare": [], "governed": []}
        for index in range(args.runs + 1):  # the first of each is a warm-up
            for path in ("bare", "governed") if index % 2 == 0 else ("governed", "bare"):
                if path == "governed":
                    stored = folder_store.archives(FEED, HOUR)
                    batch = drop_hour(folder_store, lake, spec, HOUR, stored, HOUR + timedelta(hours=2), set())
                    started = time.perf_counter()
                    # The same hour every run: forced, as its batch was ingested before.
                    row = ingest(
                        spark,
                        catalog,
                        lake,
                        spec,
                        RunRequest(requested_by="bench"),
                        batch_id=batch.batch_id,
                        force=True,
                    )
                    seconds = time.perf_counter() - started
                    if files is None:
                        copies = work / "hour-files"
                        shutil.copytree(
                            lake.batch_dir(KEY, batch.batch_id), copies, ignore=shutil.ignore_patterns("_*")
                        )
                        files = sorted(str(p) for p in copies.glob("*.json"))
                    rows = row.rows
                    shutil.rmtree(lake.batch_dir(KEY, batch.batch_id))
                    shutil.rmtree(lake.at(row.path))
                else:
                    if files is None:
                        continue
                    started = time.perf_counter()
                    spark.read.schema(", ".join(f"{n} {t}" for n, t in COLUMNS)).option("multiLine", True).json(
                        files
                    ).write.parquet(str(bare_out))
                    seconds = time.perf_counter() - started
                    shutil.rmtree(bare_out)
                if index > 0:
                    runs[path].append(seconds)
                    print(f"run {index} {path:<8} {seconds:6.2f}s", flush=True)
        spark.stop()

    bare, governed = statistics.median(runs["bare"]), statistics.median(runs["governed"])
    (low, high), _ = interval(runs["governed"], runs["bare"])
    print(
        f"ingestion of the hour ({len(files):,} files, {rows:,} rows): bare {bare:.2f}s, governed {governed:.2f}s, "
        f"governed/bare {governed / bare:.3f} ({low:.3f}-{high:.3f})"
    )


if __name__ == "__main__":
    main()
