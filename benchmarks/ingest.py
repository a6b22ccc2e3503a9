#!/usr/bin/env python
"""Governed ingestion vs. a bare Spark CSV -> Parquet copy, in one warm SparkSession.

Generates (once, cached under benchmarks/.data/) a wide CSV of mixed column types, then interleaves
runs of

  bare:      spark.read.schema(s).option("header", True).csv(path).write.parquet(out)
  governed:  governance.ingest.ingest(...) of a fresh DropZone batch holding the same file

and prints each run's wall and Spark-JVM CPU seconds, the medians, MB/s and the ratio governed/bare.
Both paths are warmed up first on a slice of the file (--warm-rows). The governed path includes each
version's Iceberg table snapshot (the default), whose own time is printed too: milliseconds per
version and its share of the governed run; so is the data_version digest's, the driver's decoding
and hashing of the files Spark wrote, next to what the governed path adds in all.

On a cluster (--master spark://host:7077) both paths run on its executors, so the driver JVM's CPU
says little and is not shown; the lake and the data must be on a path every worker sees at the
same place (on one machine: any local folder). A standalone master and two one-core workers on
this machine, from the pyspark package's own scripts:

    SPARK_HOME=$(.venv/bin/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 &
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:7077 --cores 1 --memory 2g &
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:7077 --cores 1 --memory 2g &

    .venv/bin/python benchmarks/ingest.py                         # 2.2M rows, ~490 MB, 3 runs each
    .venv/bin/python benchmarks/ingest.py --rows 20000 --runs 1   # smoke run
    .venv/bin/python benchmarks/ingest.py --master spark://127.0.0.1:7077
    .venv/bin/python benchmarks/ingest.py --s3                    # both paths write to moto's S3 server

With --s3 both paths write to an S3 server on loopback (moto's, as the tests use): the governed path
into an object-store lake (CUSTODY_LAKE=s3a://…), the bare one to another prefix of the same bucket,
both through Hadoop's S3A. The DropZone stays local, as it does for such a lake.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from governance import versions
from governance.catalog import Catalog
from governance.config import DEFAULT_TRANSFORM_PACKAGES, Settings, fetched_jars
from governance.content import digest_parquet
from governance.ingest import ingest
from governance.lake import lake_spark_conf
from governance.lake.iceberg import IcebergTables
from governance.lake.objects import ObjectLake, object_store, pyiceberg_properties
from governance.lake.snapshots import TableSnapshots
from governance.lineage.versioned import DEFAULT_COLUMNS, ColumnOptions
from governance.runs import RunRequest
from governance.spark.types import spark_schema
from governance.spec import load_specs
from governance.zones import AssetKey, Lake
from tests.s3_server import CREDENTIALS, running_s3

GOAL = 1.03  # governed ingestion against a bare Spark copy of the same file, medians
DATA = Path(__file__).resolve().parent / ".data"
BUCKET = "bench"
KEY = AssetKey("bench", "wide")
CHUNK_ROWS = 250_000
READS = 3  # timed reads of the last version by each reader
WARM_ROWS = 1_000_000  # ~220 MB: smaller slices left JIT warm-up in the first timed runs

COLUMNS = [  # (name, spec type, nullable)
    ("id", "long", False),
    ("customer_id", "int", True),
    ("order_no", "long", True),
    ("name", "string", True),
    ("email", "string", True),
    ("city", "string", True),
    ("country", "string", True),
    ("category", "string", True),
    ("comment", "string", True),
    ("quantity", "int", True),
    ("price", "decimal(10,2)", True),
    ("discount", "decimal(10,2)", True),
    ("score", "double", True),
    ("weight", "double", True),
    ("active", "boolean", True),
    ("verified", "boolean", True),
    ("order_date", "date", True),
    ("ship_date", "date", True),
    ("created_at", "timestamp", True),
    ("updated_at", "timestamp", True),
]


def spec_yaml() -> str:
    cols = "\n".join(f'  - {{name: {n}, type: "{t}", nullable: {str(nullable).lower()}}}' for n, t, nullable in COLUMNS)
    return (
        "description: Benchmark table.\n"
        "roles: {owner: bench-owners, producer: bench-producers, consumer: bench-consumers}\n"
        "zone: landing\n"
        "source: {format: csv, header: true}\n"
        f"columns:\n{cols}\n"
        "max_bad_fraction: 0.0\n"
    )


def _chunk(rng: np.random.Generator, start: int, n: int, vocab: dict[str, pa.Array]) -> pa.Table:
    def pick(name: str) -> pa.Array:
        return vocab[name].take(pa.array(rng.integers(0, len(vocab[name]), n)))

    def with_nulls(values: np.ndarray, fraction: float = 0.01) -> pa.Array:
        return pa.array(values, mask=rng.random(n) < fraction)

    day0 = np.datetime64("2020-01-01")
    order_date = day0 + rng.integers(0, 1800, n).astype("timedelta64[D]")
    created = np.datetime64("2020-01-01T00:00:00") + rng.integers(0, 150_000_000, n).astype("timedelta64[s]")
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "customer_id": pa.array(rng.integers(1, 500_000, n, dtype=np.int32)),
            "order_no": pa.array(rng.integers(10**9, 10**10, n, dtype=np.int64)),
            "name": pick("name"),
            "email": pick("email"),
            "city": pick("city"),
            "country": pick("country"),
            "category": pick("category"),
            "comment": pick("comment"),
            "quantity": pa.array(rng.integers(1, 100, n, dtype=np.int32)),
            "price": pa.array(np.round(rng.uniform(0.5, 9999, n), 2)),  # printed as d.dd: a valid decimal(10,2)
            "discount": with_nulls(np.round(rng.uniform(0, 50, n), 2), 0.2),
            "score": pa.array(np.round(rng.normal(50, 15, n), 4)),
            "weight": with_nulls(np.round(rng.exponential(3, n), 3)),
            "active": pa.array(rng.random(n) < 0.8),
            "verified": with_nulls(rng.random(n) < 0.5),
            "order_date": pa.array(order_date).cast(pa.date32()),
            "ship_date": pa.array(order_date + rng.integers(0, 10, n).astype("timedelta64[D]")).cast(pa.date32()),
            "created_at": pa.array(created),
            "updated_at": pa.array(created + rng.integers(0, 3_000_000, n).astype("timedelta64[s]")),
        }
    )


def generate(path: Path, rows: int) -> None:
    """Write `rows` rows of mixed types as CSV with a header, in chunks."""
    rng = np.random.default_rng(42)
    words = np.array(
        [
            "alpha",
            "beta",
            "gamma",
            "delta",
            "north",
            "south",
            "east",
            "west",
            "quick",
            "slow",
            "blue",
            "red",
            "green",
            "order",
            "return",
            "late",
            "early",
            "fragile",
            "bulk",
            "gift",
            "express",
            "standard",
            "priority",
        ]
    )
    first = ["Ann", "Bob", "Cara", "Dan", "Eve", "Finn", "Gus", "Hana", "Ivo", "Jo", "Kai", "Lea"]
    last = ["Smith", "Chen", "Diaz", "Okafor", "Laurent", "Novak", "Rossi", "Berg", "Kim", "Silva"]
    names = [f"{a} {b}" for a in first for b in last]
    vocab = {
        "name": pa.array(names),
        "email": pa.array([f"user{i}@example{i % 7}.com" for i in range(20_000)]),
        "city": pa.array([f"City{i:03d}" for i in range(300)]),
        "country": pa.array([f"C{i:02d}" for i in range(60)]),
        "category": pa.array([f"category_{i}" for i in range(40)]),
        "comment": pa.array([" ".join(rng.choice(words, rng.integers(2, 8))) for _ in range(2_000)]),
    }
    partial = path.with_suffix(".partial")
    with pacsv.CSVWriter(str(partial), _chunk(rng, 0, 1, vocab).schema) as writer:
        for start in range(0, rows, CHUNK_ROWS):
            writer.write_table(_chunk(rng, start, min(CHUNK_ROWS, rows - start), vocab))
    partial.rename(path)


def data_file(rows: int) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"wide_{rows}.csv"
    if not path.exists():
        started = time.perf_counter()
        generate(path, rows)
        print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f}s")
    return path


def head_slice(source: Path, target: Path, rows: int) -> Path:
    with open(source, "rb") as src, open(target, "wb") as dst:
        dst.writelines(src.readline() for _ in range(rows + 1))
    return target


def s3_settings(work: Path, endpoint: str) -> Settings:
    return Settings.from_env(
        {"CUSTODY_HOME": str(work), "CUSTODY_LAKE": f"s3a://{BUCKET}/lake", "CUSTODY_S3_ENDPOINT": endpoint}
    )


def spark_session(master: str, s3: Settings | None):
    from pyspark.sql import SparkSession

    log4j = ROOT / "resources" / "log4j2.properties"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if s3 is not None:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in fetched_jars()))
        for key, value in lake_spark_conf(s3).items():
            builder = builder.config(key, value)
    return (
        builder.master(master)
        .appName("custody-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.memory", "4g")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
        .getOrCreate()
    )


class TimedSnapshots(TableSnapshots):
    """The table snapshots of the governed path, each one's seconds kept."""

    def __init__(self, tables: IcebergTables, locks: Path):
        super().__init__(tables, locks)
        self.seconds: list[float] = []

    def after_commit(self, catalog, lake, row, progress=None, footers=None) -> None:
        started = time.perf_counter()
        super().after_commit(catalog, lake, row, footers=footers)
        self.seconds.append(time.perf_counter() - started)
        if not self.tables.tags(KEY).get(row.number):
            raise SystemExit(f"{row.ref} has no table snapshot")


class TimedDigests:
    """The data_version digests of the governed path (governance.versions' digest_parquet, which it
    stands in for), each one's seconds kept: what the driver adds after Spark's write."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, paths, filesystem=None):
        started = time.perf_counter()
        content = digest_parquet(paths, filesystem)
        self.seconds.append(time.perf_counter() - started)
        return content


class Bench:
    """The lake, catalog, spec and session both paths share; each run returns (wall s, JVM CPU s)."""

    def __init__(self, spark, work: Path, s3: Settings | None):
        self.spark, self.work = spark, work
        (work / "specs" / KEY.domain).mkdir(parents=True)
        (work / "specs" / KEY.domain / f"{KEY.name}.yaml").write_text(spec_yaml(), encoding="utf-8")
        self.spec = load_specs(work / "specs", transform_packages=DEFAULT_TRANSFORM_PACKAGES)[KEY]
        self.schema = spark_schema(self.spec.body.columns)
        catalog_url = f"sqlite:///{work / 'catalog.db'}"
        locks = work / "lake" / "_tables" / "_locks"
        self.lake: Lake
        if s3 is None:
            self.snapshots = TimedSnapshots(IcebergTables(catalog_url, f"file://{work / 'lake' / '_tables'}"), locks)
            self.lake = Lake(work / "lake", tables=self.snapshots)
            self.bare_out = str(work / "bare_out")
        else:
            store = object_store(s3)
            tables = IcebergTables(catalog_url, f"s3://{BUCKET}/lake/_tables", store, pyiceberg_properties(s3))
            self.snapshots = TimedSnapshots(tables, locks)
            self.lake = ObjectLake(s3.lake_url, store, work / "lake", self.snapshots)
            self.bare_out = f"s3a://{BUCKET}/bare_out"
        self.catalog = Catalog.from_url(catalog_url)
        self.jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()
        self.batches = 0

    def jvm_cpu(self) -> float:
        """User + system CPU seconds of the Spark JVM: less sensitive than wall time to other load."""
        fields = Path(f"/proc/{self.jvm_pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def bare(self, csv: Path) -> tuple[float, float]:
        cpu, started = self.jvm_cpu(), time.perf_counter()
        self.spark.read.schema(self.schema).option("header", True).csv(str(csv)).write.parquet(self.bare_out)
        elapsed, cpu = time.perf_counter() - started, self.jvm_cpu() - cpu
        self.lake.fs.delete_dir(self.bare_out.split("://", 1)[-1])
        return elapsed, cpu

    def governed(self, csv: Path, rows: int, columns: ColumnOptions | None = DEFAULT_COLUMNS) -> tuple[float, float]:
        self.batches += 1
        batch_id = f"b{self.batches:03d}"
        folder = self.lake.drop_dir(KEY) / batch_id
        folder.mkdir(parents=True)
        # Moved in and back out: on the same filesystem that copies nothing, and the file keeps one
        # name (a hard link would be refused).
        os.rename(csv, folder / csv.name)
        (folder / "_READY").touch()
        try:
            cpu, started = self.jvm_cpu(), time.perf_counter()
            row = ingest(
                self.spark,
                self.catalog,
                self.lake,
                self.spec,
                RunRequest(requested_by="bench"),
                batch_id=batch_id,
                force=True,
                column_lineage=columns,
            )
            elapsed, cpu = time.perf_counter() - started, self.jvm_cpu() - cpu
        finally:
            os.rename(folder / csv.name, csv)
        if row.rows != rows or row.rows_quarantined:
            raise SystemExit(
                f"governed run landed {row.rows} rows, quarantined {row.rows_quarantined}; expected {rows}"
            )
        self.last = row
        shutil.rmtree(folder, ignore_errors=True)
        return elapsed, cpu

    def drop_last(self) -> None:
        """Delete the files of the last governed version, which the next run's disk space needs."""
        for path in (self.last.path, self.last.quarantine_path):
            if path:
                self.lake.delete(self.lake.at(path), self.last.ref)

    def reads(self) -> dict[str, float]:
        """Seconds to read the last governed version whole: as `custody read` does, and by its tag
        with PyIceberg and with DuckDB's iceberg extension."""
        from importlib.resources import files

        import duckdb

        from governance.access.reads import read_table
        from governance.lake.iceberg import tag_of

        tables = self.snapshots.tables
        table = tables.load(KEY)
        snapshot = table.snapshot_by_name(tag_of(self.last.number)).snapshot_id
        connection = duckdb.connect()
        for name in ("avro", "iceberg"):
            binary = (
                files(f"duckdb_extension_{name}") / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
            )
            connection.execute(f"LOAD '{binary}'")
        readers = {
            "custody read": lambda: read_table(self.lake, self.last).num_rows,
            "PyIceberg, by tag": lambda: table.scan(snapshot_id=snapshot).to_arrow().num_rows,
        }
        if not isinstance(self.lake, ObjectLake):  # DuckDB would need its httpfs extension for S3
            readers["DuckDB, by tag"] = lambda: (
                connection.execute(
                    "SELECT * FROM iceberg_scan(?, snapshot_from_id = ?)", [table.metadata_location, snapshot]
                )
                .to_arrow_table()
                .num_rows
            )
        seconds: dict[str, list[float]] = {name: [] for name in readers}
        for _ in range(READS + 1):  # the first round reads the files into the page cache, untimed
            for name, read in readers.items():
                started = time.perf_counter()
                if read() != self.last.rows:
                    raise SystemExit(f"{name} did not read the {self.last.rows} rows of {self.last.ref}")
                seconds[name].append(time.perf_counter() - started)
        return {name: statistics.median(times[1:]) for name, times in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_200_000, help="rows in the generated CSV")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each path")
    parser.add_argument("--warm-rows", type=int, default=WARM_ROWS, help="rows of the warm-up slice")
    parser.add_argument("--master", default="local[2]", help="Spark master: local[N], or a cluster's spark://host:port")
    parser.add_argument("--s3", action="store_true", help="both paths write to moto's S3 server on loopback")
    args = parser.parse_args()
    with ExitStack() as stack:
        endpoint = None
        if args.s3:
            os.environ.update(CREDENTIALS)  # before Spark starts: S3A reads them from its environment
            endpoint = stack.enter_context(running_s3()).endpoint
        run_bench(args, endpoint)


def run_bench(args: argparse.Namespace, endpoint: str | None) -> None:
    local = args.master.startswith("local")
    csv = data_file(args.rows)
    size_mb = csv.stat().st_size / 1e6
    runs: dict[str, list[tuple[float, float]]] = {"bare": [], "governed": []}
    snapshots: list[float] = []
    digests = TimedDigests()
    versions.digest_parquet = digests  # type: ignore[assignment]  # the same function, timed
    with tempfile.TemporaryDirectory(prefix="ingest-", dir=DATA) as tmp:  # under .data: same filesystem
        s3 = s3_settings(Path(tmp), endpoint) if endpoint else None
        if endpoint:
            import boto3

            boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=BUCKET)
        spark = spark_session(args.master, s3)
        bench = Bench(spark, Path(tmp), s3)
        warm_rows = min(args.warm_rows, args.rows)
        warm = head_slice(csv, Path(tmp) / "warm.csv", warm_rows)
        print(
            f"warm-up on {warm_rows:,} rows: bare {bench.bare(warm)[0]:.2f}s, "
            f"governed {bench.governed(warm, warm_rows)[0]:.2f}s",
            flush=True,
        )
        bench.drop_last()
        for i in range(args.runs):  # interleaved, alternating which path goes first
            for path in ("bare", "governed") if i % 2 == 0 else ("governed", "bare"):
                if path == "governed" and i:
                    bench.drop_last()
                result = bench.bare(csv) if path == "bare" else bench.governed(csv, args.rows)
                runs[path].append(result)
                if path == "governed":
                    snapshots.append(bench.snapshots.seconds[-1])
                cpu_shown = f"{result[1]:6.2f}s JVM CPU  " if local else ""
                print(
                    f"run {i + 1} {path:<8} {result[0]:6.2f}s wall {cpu_shown}(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        reads = bench.reads()
        spark.stop()

    wall = {p: statistics.median(t for t, _ in r) for p, r in runs.items()}
    cpu = {p: statistics.median(c for _, c in r) for p, r in runs.items()}
    ratios = [g[0] / b[0] for g, b in zip(runs["governed"], runs["bare"])]
    print(
        f"\ninput: {csv.name}, {args.rows:,} rows, {len(COLUMNS)} columns, {size_mb:.0f} MB; "
        f"{args.master}, {args.runs} runs each; lake {'on S3 (moto, loopback)' if endpoint else 'in a local folder'}"
    )
    width = max(16, 7 * args.runs + 2)
    print(f"{'path':<10}{'wall s per run':<{width}}{'median s':>9}{'MB/s':>8}{'JVM CPU s' if local else '':>11}")
    for path, results in runs.items():
        times = " ".join(f"{t:6.2f}" for t, _ in results)
        print(
            f"{path:<10}{times:<{width}}{wall[path]:9.2f}{size_mb / wall[path]:8.1f}"
            + (f"{cpu[path]:11.2f}" if local else "")
        )
    cpu_ratio = f"; JVM CPU ratio (medians) {cpu['governed'] / cpu['bare']:.2f}" if local else ""
    print(f"per-run ratios: {' '.join(f'{r:.2f}' for r in ratios)}{cpu_ratio}")
    timed = digests.seconds[-len(runs["governed"]) :]
    digest = statistics.median(timed)
    print(
        f"data_version digest per version: {' '.join(f'{t:.2f}' for t in timed)} s, median {digest:.2f} s, "
        f"{100 * digest / wall['governed']:.1f}% of the governed run; governed - bare (medians) "
        f"{wall['governed'] - wall['bare']:.2f} s"
    )
    snapshot = statistics.median(snapshots)
    print(
        f"table snapshot per version: {' '.join(f'{1000 * t:.0f}' for t in snapshots)} ms, median "
        f"{1000 * snapshot:.0f} ms, {100 * snapshot / wall['governed']:.2f}% of the governed run  goal <= 3%"
    )
    print(
        f"reading {bench.last.ref} whole ({args.rows:,} rows, median of {READS}): "
        + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in reads.items())
    )
    ratio = wall["governed"] / wall["bare"]
    print(f"ratio governed/bare (median): {ratio:.2f}  goal <= {GOAL}  ({'met' if ratio <= GOAL else 'MISSED'})")


if __name__ == "__main__":
    main()
