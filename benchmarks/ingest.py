#!/usr/bin/env python
"""Governed ingestion vs. a bare Spark CSV -> Parquet copy, in one warm SparkSession.

Generates (once, cached under benchmarks/.data/) a wide CSV of mixed column types, then interleaves
runs of

  bare:      spark.read.schema(s).option("header", True).csv(path).write.parquet(out)
  governed:  governance.ingest.ingest(...) of a fresh DropZone batch holding the same file

and prints each run's seconds, the medians, MB/s and the median ratio governed/bare.

    .venv/bin/python benchmarks/ingest.py                      # 2.2M rows, ~350 MB, 3 runs each
    .venv/bin/python benchmarks/ingest.py --rows 20000 --runs 1   # smoke run
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

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from governance.catalog import Catalog  # noqa: E402
from governance.ingest import ingest  # noqa: E402
from governance.runs import RunRequest  # noqa: E402
from governance.sparktypes import spark_schema  # noqa: E402
from governance.spec import load_specs  # noqa: E402
from governance.zones import AssetKey, Lake  # noqa: E402

DATA = Path(__file__).resolve().parent / ".data"
KEY = AssetKey("bench", "wide")
CHUNK_ROWS = 250_000
WARM_ROWS = 250_000  # ~55 MB: enough for the JIT to settle before the timed runs

COLUMNS = [  # (name, spec type, nullable)
    ("id", "long", False), ("customer_id", "int", True), ("order_no", "long", True),
    ("name", "string", True), ("email", "string", True), ("city", "string", True),
    ("country", "string", True), ("category", "string", True), ("comment", "string", True),
    ("quantity", "int", True), ("price", "decimal(10,2)", True), ("discount", "decimal(10,2)", True),
    ("score", "double", True), ("weight", "double", True), ("active", "boolean", True),
    ("verified", "boolean", True), ("order_date", "date", True), ("ship_date", "date", True),
    ("created_at", "timestamp", True), ("updated_at", "timestamp", True),
]


def spec_yaml() -> str:
    cols = "\n".join(
        f'  - {{name: {n}, type: "{t}", nullable: {str(nullable).lower()}}}' for n, t, nullable in COLUMNS
    )
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
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "customer_id": pa.array(rng.integers(1, 500_000, n, dtype=np.int32)),
        "order_no": pa.array(rng.integers(10**9, 10**10, n, dtype=np.int64)),
        "name": pick("name"), "email": pick("email"), "city": pick("city"),
        "country": pick("country"), "category": pick("category"), "comment": pick("comment"),
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
    })


def generate(path: Path, rows: int) -> None:
    """Write `rows` rows of mixed types as CSV with a header, in chunks."""
    rng = np.random.default_rng(42)
    words = np.array("alpha beta gamma delta north south east west quick slow blue red green order "
                     "return late early fragile bulk gift express standard priority".split())
    names = [f"{a} {b}" for a in ("Ann Bob Cara Dan Eve Finn Gus Hana Ivo Jo Kai Lea".split())
             for b in ("Smith Chen Diaz Okafor Laurent Novak Rossi Berg Kim Silva".split())]
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
        for _ in range(rows + 1):
            dst.write(src.readline())
    return target


def spark_session():
    from pyspark.sql import SparkSession

    log4j = ROOT / "resources" / "log4j2.properties"
    return (
        SparkSession.builder.master("local[2]").appName("custody-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
        .getOrCreate()
    )


class Bench:
    """The lake, catalog, spec and session both paths share."""

    def __init__(self, spark, work: Path):
        self.spark, self.work = spark, work
        (work / "specs" / KEY.domain).mkdir(parents=True)
        (work / "specs" / KEY.domain / f"{KEY.name}.yaml").write_text(spec_yaml(), encoding="utf-8")
        self.spec = load_specs(work / "specs")[KEY]
        self.schema = spark_schema(self.spec.body.columns)
        self.lake = Lake(work / "lake")
        self.catalog = Catalog.from_url(f"sqlite:///{work / 'catalog.db'}")
        self.batches = 0

    def bare(self, csv: Path) -> float:
        out = self.work / "bare_out"
        started = time.perf_counter()
        self.spark.read.schema(self.schema).option("header", True).csv(str(csv)).write.parquet(str(out))
        elapsed = time.perf_counter() - started
        shutil.rmtree(out)
        return elapsed

    def governed(self, csv: Path, rows: int) -> float:
        self.batches += 1
        batch_id = f"b{self.batches:03d}"
        folder = self.lake.drop_dir(KEY) / batch_id
        folder.mkdir(parents=True)
        os.link(csv, folder / csv.name)  # same filesystem: no copy, and not a symlink
        (folder / "_READY").touch()
        started = time.perf_counter()
        row = ingest(self.spark, self.catalog, self.lake, self.spec, RunRequest(requested_by="bench"),
                     batch_id=batch_id, force=True)
        elapsed = time.perf_counter() - started
        if row.rows != rows or row.rows_quarantined:
            raise SystemExit(f"governed run landed {row.rows} rows, quarantined {row.rows_quarantined}; expected {rows}")
        for path in (row.path, row.quarantine_path, folder):
            if path:
                shutil.rmtree(path, ignore_errors=True)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_200_000, help="rows in the generated CSV")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each path")
    parser.add_argument("--warm-rows", type=int, default=WARM_ROWS, help="rows of the warm-up slice")
    args = parser.parse_args()

    csv = data_file(args.rows)
    size_mb = csv.stat().st_size / 1e6
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="ingest-", dir=DATA) as tmp:  # under .data: same filesystem
        bench = Bench(spark, Path(tmp))
        warm = head_slice(csv, Path(tmp) / "warm.csv", min(args.warm_rows, args.rows))
        bench.bare(warm)
        bench.governed(warm, min(args.warm_rows, args.rows))

        bare, governed = [], []
        for i in range(args.runs):  # interleaved, alternating which path goes first
            order = ("bare", "governed") if i % 2 == 0 else ("governed", "bare")
            for path in order:
                if path == "bare":
                    bare.append(bench.bare(csv))
                else:
                    governed.append(bench.governed(csv, args.rows))
                print(f"run {i + 1} {path:<8} {(bare if path == 'bare' else governed)[-1]:7.2f}s", flush=True)
    spark.stop()

    b, g = statistics.median(bare), statistics.median(governed)
    ratios = [gv / bv for gv, bv in zip(governed, bare)]
    print(f"\ninput: {csv.name}, {args.rows:,} rows, {len(COLUMNS)} columns, {size_mb:.0f} MB; "
          f"local[2], {args.runs} runs each")
    print(f"{'path':<10}{'runs (s)':<28}{'median s':>9}{'MB/s':>8}")
    for name, times, median in (("bare", bare, b), ("governed", governed, g)):
        print(f"{name:<10}{' '.join(f'{t:6.2f}' for t in times):<28}{median:9.2f}{size_mb / median:8.1f}")
    print(f"per-run ratios: {' '.join(f'{r:.3f}' for r in ratios)}")
    print(f"ratio governed/bare (median): {g / b:.2f}  goal <= 1.10  "
          f"({'met' if g / b <= 1.10 else 'MISSED'}; median of per-run ratios {statistics.median(ratios):.2f})")


if __name__ == "__main__":
    main()
