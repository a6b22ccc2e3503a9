#!/usr/bin/env python
"""Column lineage extraction: its cost against the plan's own JSON call, and its share of an ingestion.

Part 1 builds plans of width 10, 100, 500 and 1,000 columns by depth 5, 50 and 200 operations over a
Parquet file (a cycle of arithmetic projections, filters, renames, CASE WHEN projections and joins
with a lookup table), then times, in the same session,

  json:     df._jdf.queryExecution().analyzed().toJSON()       (the baseline)
  file:     the same JSON written by the JVM to a file and read back, as `extract` gets it
  extract:  governance.lineage.spark.extract(df)                (the JSON, reading it, and the relations)

and prints the milliseconds and the ratio extract/json (goal <= 3). `toJSON` hands the string back
through Py4J, whose answers of 16 KB and more can wait 40 ms on TCP acknowledgements; `extract`
avoids that wait, so extract/file shows its own cost beside the JSON.

Part 2 runs the ingest benchmark's governed ingestion with column lineage on and off, interleaved,
and prints the ratio on/off (goal <= 1.05).

    .venv/bin/python -m benchmarks.column_lineage                       # both parts
    .venv/bin/python -m benchmarks.column_lineage --rows 200000 --runs 1  # quicker part 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.ingest import DATA, Bench, data_file, head_slice, spark_session
from governance.lineage.spark import extract
from governance.lineage.versioned import DEFAULT_COLUMNS

WIDTHS = (10, 100, 500, 1000)
DEPTHS = (5, 50, 200)
GOAL_EXTRACT = 3.0
GOAL_INGEST = 1.05


def build_plan(spark, source: str, lookup: str, width: int, depth: int):
    from pyspark.sql import functions as F

    frame = spark.read.parquet(source)
    keys = spark.read.parquet(lookup)
    for step in range(depth):
        names = frame.columns
        target = names[step % width]
        kind = step % 5
        if kind == 0:
            frame = frame.select(*[(F.col(n) * 2 + 1).alias(n) if n == target else F.col(n) for n in names])
        elif kind == 1:
            frame = frame.filter(F.col(target) > -1)
        elif kind == 2:
            frame = frame.withColumnRenamed(target, f"r{step}")
        elif kind == 3:
            frame = frame.select(
                *[
                    F.when(F.col(n) > 0, F.col(n)).otherwise(F.lit(0)).alias(n) if n == target else F.col(n)
                    for n in names
                ]
            )
        else:
            frame = frame.join(keys, frame[names[0]] == keys["k"], "left").drop("k", "tag")
    return frame


def timed(call, repeat: int, at_least: float = 1.0) -> float:
    """Median seconds of `call`, run `repeat` times and for at least `at_least` seconds in all."""
    times: list[float] = []
    while len(times) < repeat or (sum(times) < at_least and len(times) < 200):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def json_through_file(frame, analyzed, work: Path):
    from governance.lineage.spark import json_writer

    mapper, file_class = json_writer(frame.sparkSession._jvm)
    target = work / "plan.json"

    def call() -> bytes:
        mapper.writeValue(file_class(str(target)), analyzed.jsonValue())
        return target.read_bytes()

    return call


def extraction(spark, work: Path, repeat: int) -> list[tuple[int, int, float, float, float, int]]:
    lookup = str(work / "lookup")
    spark.range(10).selectExpr("id AS k", "cast(id AS string) AS tag").write.parquet(lookup)
    results = []
    for width in WIDTHS:
        source = str(work / f"wide_{width}")
        spark.range(100).selectExpr(*[f"id + {i} AS c{i}" for i in range(width)]).write.parquet(source)
        for depth in DEPTHS:
            frame = build_plan(spark, source, lookup, width, depth)
            analyzed = frame._jdf.queryExecution().analyzed()
            size = len(analyzed.toJSON())
            timed(lambda f=frame: extract(f), 3, at_least=0.5)  # warm-up: the JIT, py4j, Python's caches
            json_s = timed(analyzed.toJSON, repeat)
            file_s = timed(json_through_file(frame, analyzed, work), repeat)
            extract_s = timed(lambda f=frame: extract(f), repeat)
            results.append((width, depth, json_s, file_s, extract_s, size))
            print(
                f"width {width:>5} depth {depth:>4}: json {json_s * 1000:8.1f} ms  file {file_s * 1000:8.1f} ms  "
                f"extract {extract_s * 1000:8.1f} ms  ratio {extract_s / json_s:5.2f}  ({size / 1e6:.1f} MB of JSON)",
                flush=True,
            )
    return results


def ingestion(spark, rows: int, runs: int, warm_rows: int) -> tuple[list[float], list[float]]:
    csv = data_file(rows)
    on, off = [], []
    with tempfile.TemporaryDirectory(prefix="column-lineage-", dir=DATA) as tmp:
        bench = Bench(spark, Path(tmp))
        warm = head_slice(csv, Path(tmp) / "warm.csv", min(warm_rows, rows))
        bench.governed(warm, min(warm_rows, rows), columns=DEFAULT_COLUMNS)
        bench.governed(warm, min(warm_rows, rows), columns=None)
        for i in range(runs):
            for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
                wall, _ = bench.governed(csv, rows, columns=DEFAULT_COLUMNS if mode == "on" else None)
                (on if mode == "on" else off).append(wall)
                print(f"run {i + 1} column lineage {mode:<3} {wall:6.2f}s", flush=True)
    return on, off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="timings of each plan, median kept")
    parser.add_argument("--rows", type=int, default=2_200_000, help="rows of the ingestion benchmark's CSV")
    parser.add_argument("--runs", type=int, default=3, help="ingestions with column lineage on, and off")
    parser.add_argument("--warm-rows", type=int, default=200_000, help="rows of the ingestion warm-up")
    parser.add_argument("--skip-ingest", action="store_true", help="only part 1")
    args = parser.parse_args()

    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="plans-") as tmp:
        results = extraction(spark, Path(tmp), args.repeat)
    on, off = ([], []) if args.skip_ingest else ingestion(spark, args.rows, args.runs, args.warm_rows)
    spark.stop()

    print(
        f"\n{'width':>6}{'depth':>7}{'JSON MB':>9}{'json ms':>10}{'file ms':>10}{'extract ms':>12}"
        f"{'extract/json':>14}{'extract/file':>14}"
    )
    for width, depth, json_s, file_s, extract_s, size in results:
        print(
            f"{width:>6}{depth:>7}{size / 1e6:>9.1f}{json_s * 1000:>10.1f}{file_s * 1000:>10.1f}{extract_s * 1000:>12.1f}"
            f"{extract_s / json_s:>14.2f}{extract_s / file_s:>14.2f}"
        )
    worst = max(extract_s / json_s for _, _, json_s, _, extract_s, _ in results)
    print(
        f"worst ratio extract/json: {worst:.2f}  goal <= {GOAL_EXTRACT:g}  ({'met' if worst <= GOAL_EXTRACT else 'MISSED'})"
    )
    print(f"worst ratio extract/file: {max(e / f for _, _, _, f, e, _ in results):.2f}")
    if on:
        ratio = statistics.median(on) / statistics.median(off)
        print(
            f"ingestion of {args.rows:,} rows, median of {args.runs}: column lineage on {statistics.median(on):.2f}s, "
            f"off {statistics.median(off):.2f}s"
        )
        print(f"ratio on/off: {ratio:.3f}  goal <= {GOAL_INGEST:g}  ({'met' if ratio <= GOAL_INGEST else 'MISSED'})")


if __name__ == "__main__":
    main()
