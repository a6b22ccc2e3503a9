#!/usr/bin/env python
"""Governed landing of a Kafka topic vs. a bare Spark Kafka -> Parquet job, in one warm SparkSession
with Custody's own settings (resources.spark).

Starts a throwaway single-node broker (as the tests do), creates a streamed asset's topic with its
ACLs as applying the spec would, then for each run produces `--records` JSON records and times

  governed:  governance.streams.landing.land_topic: the records since the last version, read as the
             landing account, copied into staging, parsed, checked, counted, committed with their
             offsets, with column lineage and the ledger, and given its Iceberg table snapshot (the
             benchmark stops if a snapshot failed: that version was not timed whole)
  bare:      the same offset range read by Spark's Kafka source, its JSON parsed with the schema
             Spark infers, written as Parquet

alternately, the bare run reading exactly the range the governed one committed. It prints each
run's wall seconds, the medians, records/s, and the ratio of the medians governed/bare with its
90% bootstrap interval (whole runs resampled, each pair kept together).

    .venv/bin/python benchmarks/stream_landing.py                          # 500,000 records, 7 runs
    .venv/bin/python benchmarks/stream_landing.py --records 20000 --runs 1 # smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sqlmodel import select

from benchmarks.session import custody_session
from benchmarks.stats import interval
from governance import ledger
from governance.access.directory import FileDirectory
from governance.catalog import Catalog
from governance.catalog.models import StreamRead
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.lake import open_lake
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.streams.broker import KafkaAdmin
from governance.streams.landing import land_topic
from governance.streams.local import LocalBroker, running
from governance.streams.settings import KafkaSettings
from governance.streams.topics import keep_in_step
from tests.ports import free_port

TOPIC = "bench.clicks"
GOAL = 1.10
SPEC = """\
description: Clicks, for the benchmark.
roles: {owner: sales-owners, producer: sales-producers, consumer: sales-consumers}
zone: landing
source: {format: kafka, topic: bench.clicks, partitions: PARTITIONS, retention: 1d}
"""
PAGES = ["/", "/products", "/cart", "/checkout", "/about"]


def produce(settings: KafkaSettings, count: int, start: int) -> None:
    producer = Producer({**settings.client_config(), "linger.ms": 50, "batch.num.messages": 10_000})
    draw = random.Random(start)
    for n in range(start, start + count):
        record = {
            "click": n,
            "page": draw.choice(PAGES),
            "user": {"id": draw.randrange(100_000), "country": draw.choice(["FR", "DE", "US", "JP"])},
            "ms": draw.random() * 500,
        }
        while True:
            try:
                producer.produce(TOPIC, json.dumps(record).encode())
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "records still unsent after 120 s"


def bare(spark: SparkSession, settings: KafkaSettings, ranges: list[StreamRead], out: Path) -> float:
    started = time.perf_counter()
    reading = [r for r in ranges if r.end_offset > r.start_offset]
    records = (
        spark.read.format("kafka")
        .options(**settings.spark_options(settings.lander, settings.lander_password))
        .option("assign", json.dumps({TOPIC: [r.partition for r in reading]}))
        .option("startingOffsets", json.dumps({TOPIC: {str(r.partition): r.start_offset for r in reading}}))
        .option("endingOffsets", json.dumps({TOPIC: {str(r.partition): r.end_offset for r in reading}}))
        .load()
    )
    values = records.select(F.col("value").cast("string").alias("json"))
    schema = spark.read.json(values.rdd.map(lambda row: row.json)).schema
    values.select(F.from_json("json", schema).alias("r")).select("r.*").write.parquet(str(out))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000, help="records produced before each run")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    broker = LocalBroker(root / "kafka", free_port(), free_port(), "custody", "bench-admin-password")
    try:
        with running(broker):
            measure(root, broker, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure(root: Path, broker: LocalBroker, args: argparse.Namespace) -> None:
    settings = KafkaSettings.from_env({**broker.environment, "CUSTODY_KAFKA_LANDER_PASSWORD": "bench-lander"})
    specs_root = root / "specs"
    (specs_root / "bench").mkdir(parents=True)
    spec_text = SPEC.replace("PARTITIONS", str(args.partitions))
    (specs_root / "bench" / "clicks.yaml").write_text(spec_text, encoding="utf-8")
    spec = next(iter(load_specs(specs_root, transform_packages=DEFAULT_TRANSFORM_PACKAGES)))
    home = Settings.under(root / "home", specs_root)
    catalog = Catalog.from_settings(home, {})
    lake = open_lake(home)
    directory = FileDirectory.load(ROOT / "assets" / "directory.yaml")
    keep_in_step(catalog, KafkaAdmin(settings), directory, [spec], actor="bench", assurance=None, because="apply")
    spark = custody_session(home.table_jars())
    governed_s, bare_s = [], []
    produce(settings, args.records, 0)  # a warm-up run of each, not counted
    row = land_topic(spark, catalog, lake, spec, RunRequest("bench"), settings=settings)
    bare(spark, settings, ranges_of(catalog, row.stored_id), root / "bare-warmup")
    for run in range(args.runs):
        produce(settings, args.records, (run + 1) * args.records)
        started = time.perf_counter()
        row = land_topic(spark, catalog, lake, spec, RunRequest("bench"), settings=settings)
        governed_s.append(time.perf_counter() - started)
        assert row.rows == args.records, f"landed {row.rows} of {args.records}"
        bare_s.append(bare(spark, settings, ranges_of(catalog, row.stored_id), root / f"bare-{run}"))
        print(f"run {run + 1}: governed {governed_s[-1]:.2f} s, bare {bare_s[-1]:.2f} s", flush=True)
    unsnapshotted = snapshot_failures(catalog)
    if unsnapshotted:
        raise SystemExit(f"versions landed without their table snapshot, so not timed whole: {unsnapshotted}")
    governed, baseline = statistics.median(governed_s), statistics.median(bare_s)
    (low, high), _ = interval(governed_s, bare_s)
    print(
        f"{args.records:,} records, {args.partitions} partitions, medians of {args.runs}: governed {governed:.2f} s "
        f"({args.records / governed:,.0f} records/s), bare {baseline:.2f} s ({args.records / baseline:,.0f} records/s)"
    )
    verdict = "met" if high <= GOAL else "MISSED"
    print(f"governed/bare {governed / baseline:.2f} (90% interval {low:.2f}-{high:.2f}); goal <= {GOAL}: {verdict}")


def snapshot_failures(catalog: Catalog) -> list[str]:
    """The reasons of every table snapshot that failed after a landing committed its version."""
    with catalog.reading() as session:
        found = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.TABLE_SNAPSHOT_FAILED))
        return [str(entry.details) for entry in found]


def ranges_of(catalog: Catalog, version_id: int) -> list[StreamRead]:
    with catalog.reading() as session:
        return list(session.exec(select(StreamRead).where(StreamRead.version_id == version_id)))


if __name__ == "__main__":
    main()
