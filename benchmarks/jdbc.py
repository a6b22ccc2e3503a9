#!/usr/bin/env python
"""Governed ingestion of a PostgreSQL table vs. a bare Spark JDBC -> Parquet copy, in one warm SparkSession.

Starts a throwaway PostgreSQL server (as the tests do), fills a table of mixed column types with
`--rows` rows, then interleaves runs of

  bare:      spark.read.jdbc(url, "orders", ...).write.parquet(out)
  governed:  governance.ingest.ingest(...) of a landing asset whose spec reads the same table

once reading in one query, once split into `--partitions` reads on the primary key. Both paths use
the same driver, fetch size and partitioning; the governed one also takes the snapshot its reads
share, checks the declared columns, counts, hashes, records lineage and commits. It prints each
run's wall seconds, the medians, rows/s, and the ratio of the medians governed/bare with its 90%
bootstrap interval (whole runs resampled, each pair kept together).

    .venv/bin/python benchmarks/jdbc.py                        # 1M rows, 15 runs of each
    .venv/bin/python benchmarks/jdbc.py --rows 20000 --runs 1  # smoke run
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg

from benchmarks.session import custody_session
from benchmarks.stats import interval
from governance.catalog import Catalog
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings
from governance.ingest import ingest
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.zones import AssetKey, Lake
from tests.pg_server import PostgresServer, running_postgres

KEY = AssetKey("bench", "orders")
# governed / bare, met when the interval's upper end is within it: one query, and split into partitions
GOAL_ONE_QUERY = 1.10
GOAL_PARTITIONED = 1.05
FETCH_SIZE = 10_000
TABLE = """CREATE TABLE orders (
    id bigint PRIMARY KEY, customer_id integer NOT NULL, name text, city text, amount numeric(10, 2),
    score double precision, active boolean, order_date date, updated_at timestamptz NOT NULL, comment text)"""
FILL = """INSERT INTO orders
    SELECT g, ((g * 7919) % 500000)::integer, 'customer ' || (g % 1000), 'City' || lpad((g % 300)::text, 3, '0'),
           ((g % 100000) / 100.0)::numeric(10, 2), (g % 1000) / 7.0, g % 5 <> 0, date '2020-01-01' + (g % 1800)::integer,
           timestamptz '2020-01-01 00:00:00+00' + g * interval '1 second',
           CASE WHEN g % 10 = 0 THEN NULL ELSE repeat('note ', (1 + g % 6)::integer) END
    FROM generate_series(1::bigint, {rows}) g"""
COLUMNS = [
    ("id", "long", False),
    ("customer_id", "int", False),
    ("name", "string", True),
    ("city", "string", True),
    ("amount", "decimal(10,2)", True),
    ("score", "double", True),
    ("active", "boolean", True),
    ("order_date", "date", True),
    ("updated_at", "timestamp", False),
    ("comment", "string", True),
]


def spec_yaml(server: PostgresServer, partitions: int) -> str:
    columns = "\n".join(
        f'  - {{name: {n}, type: "{t}", nullable: {str(nullable).lower()}}}' for n, t, nullable in COLUMNS
    )
    split = f"  partition_column: id\n  num_partitions: {partitions}\n" if partitions > 1 else ""
    return (
        "description: Benchmark table.\n"
        "roles: {owner: bench-owners, producer: bench-producers, consumer: bench-consumers}\n"
        "zone: landing\n"
        f"source:\n  format: jdbc\n  url: jdbc:postgresql://{server.host}:{server.port}/bench\n"
        f"  user_env: BENCH_DB_USER\n  password_env: BENCH_DB_PASSWORD\n  table: public.orders\n  fetch_size: {FETCH_SIZE}\n{split}"
        f"columns:\n{columns}\nmax_bad_fraction: 0.0\n"
    )


class Bench:
    """One server's table, read bare and governed; each run returns its wall seconds."""

    def __init__(self, spark, server: PostgresServer, work: Path, rows: int):
        self.spark, self.server, self.work, self.rows = spark, server, work, rows
        self.lake = Lake(work / "lake")
        self.catalog = Catalog.from_url(f"sqlite:///{work / 'catalog.db'}")
        self.url = f"jdbc:postgresql://{server.host}:{server.port}/bench"
        os.environ.update(BENCH_DB_USER=server.user, BENCH_DB_PASSWORD=server.password)

    def spec(self, partitions: int):
        folder = self.work / f"specs-{partitions}"
        (folder / KEY.domain).mkdir(parents=True, exist_ok=True)
        (folder / KEY.domain / f"{KEY.name}.yaml").write_text(spec_yaml(self.server, partitions), encoding="utf-8")
        return load_specs(folder, transform_packages=DEFAULT_TRANSFORM_PACKAGES)[KEY]

    def bare(self, partitions: int) -> float:
        out = self.work / "bare_out"
        started = time.perf_counter()
        reader = (
            self.spark.read.format("jdbc")
            .option("url", self.url)
            .option("dbtable", "orders")
            .option("user", self.server.user)
            .option("password", self.server.password)
            .option("driver", "org.postgresql.Driver")
            .option("fetchsize", str(FETCH_SIZE))
        )
        if partitions > 1:
            reader = (
                reader.option("partitionColumn", "id")
                .option("lowerBound", "1")
                .option("upperBound", str(self.rows))
                .option("numPartitions", str(partitions))
            )
        reader.load().write.parquet(str(out))
        elapsed = time.perf_counter() - started
        shutil.rmtree(out)
        return elapsed

    def governed(self, spec) -> float:
        started = time.perf_counter()
        row = ingest(self.spark, self.catalog, self.lake, spec, RunRequest(requested_by="bench"))
        elapsed = time.perf_counter() - started
        if row.rows != self.rows or row.rows_quarantined:
            raise SystemExit(
                f"governed run landed {row.rows} rows, quarantined {row.rows_quarantined}; expected {self.rows}"
            )
        shutil.rmtree(self.lake.at(row.path))
        return elapsed


def fill(server: PostgresServer, rows: int) -> None:
    server.create_database("bench")
    dsn = f"host={server.host} port={server.port} user={server.user} password={server.password} dbname=bench"
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(TABLE)
        connection.execute(FILL.format(rows=int(rows)))
        connection.execute("VACUUM ANALYZE orders")
    print(f"filled orders with {rows:,} rows in {time.perf_counter() - started:.1f}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the table")
    parser.add_argument("--runs", type=int, default=15, help="timed runs of each path, for each way of reading")
    parser.add_argument("--partitions", type=int, default=4, help="reads a partitioned run splits into")
    args = parser.parse_args()

    spark = custody_session(Settings.from_env({}).spark_jars())
    results: dict[str, dict[str, list[float]]] = {}
    with running_postgres() as server, tempfile.TemporaryDirectory(prefix="jdbc-bench-") as tmp:
        fill(server, args.rows)
        bench = Bench(spark, server, Path(tmp), args.rows)
        for partitions in (1, args.partitions):
            mode = "one query" if partitions == 1 else f"{partitions} partitions"
            spec = bench.spec(partitions)
            print(
                f"{mode}: warm-up bare {bench.bare(partitions):.2f}s, governed {bench.governed(spec):.2f}s", flush=True
            )
            runs = results[mode] = {"bare": [], "governed": []}
            for i in range(args.runs):  # interleaved, alternating which path goes first
                for path in ("bare", "governed") if i % 2 == 0 else ("governed", "bare"):
                    seconds = bench.bare(partitions) if path == "bare" else bench.governed(spec)
                    runs[path].append(seconds)
                    print(f"{mode} run {i + 1} {path:<8} {seconds:6.2f}s (load {os.getloadavg()[0]:.1f})", flush=True)
    spark.stop()

    print(
        f"\ntable: {args.rows:,} rows, {len(COLUMNS)} columns; local[2], fetch size {FETCH_SIZE:,}, {args.runs} runs each"
    )
    print(
        f"{'read':<14}{'bare s':>8}{'governed s':>12}{'rows/s':>10}  {'governed/bare (90%)':<24}{'s added (90%)':<25}goal"
    )
    for mode, runs in results.items():
        bare, governed = statistics.median(runs["bare"]), statistics.median(runs["governed"])
        (low, high), (added_low, added_high) = interval(runs["governed"], runs["bare"])
        goal = GOAL_ONE_QUERY if mode == "one query" else GOAL_PARTITIONED
        met = "meets" if high <= goal else "misses"
        ratio = f"{governed / bare:.3f} ({low:.3f}-{high:.3f})"
        added = f"{governed - bare:+.2f} ({added_low / 1000:+.2f} to {added_high / 1000:+.2f})"
        print(
            f"{mode:<14}{bare:>8.2f}{governed:>12.2f}{args.rows / governed:>10,.0f}  {ratio:<24}{added:<25}{met} <= {goal:.2f}"
        )


if __name__ == "__main__":
    main()
