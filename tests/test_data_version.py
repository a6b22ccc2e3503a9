"""A version's data_version identifies its rows: schema and values in order, however they were written."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from governance import content
from governance.content import digest_parquet
from governance.demo import (
    CLIENTS,
    NAMES_AND_PRODUCTS,
    PRODUCT_SUMMARY,
    PRODUCTS,
    drop_demo_batches,
)
from governance.ingest import ingest
from governance.integrate import materialize
from governance.runs import RunRequest
from governance.versions import seal
from governance.zones import AssetKey, Lake
from tests.conftest import drop
from tests.helpers import sha256_file

BOB = RunRequest(requested_by="bob", run_id="run-1")
NESTED = (
    "id long, user struct<name: string, age: int>, tags array<string>, attrs map<string, int>, "
    "amount decimal(12,2), at timestamp, day date"
)
RECORDS = [
    {
        "id": 1,
        "user": {"name": "ann", "age": 31},
        "tags": ["a", "b"],
        "attrs": {"x": 1, "y": 2},
        "amount": "12.50",
        "at": "2026-11-22T06:38:01.123456Z",
        "day": "2026-11-22",
    },
    {"id": 2, "user": None, "tags": [], "attrs": None, "amount": None, "at": None, "day": None},
    {
        "id": 3,
        "user": {"name": None, "age": None},
        "tags": ["c", None],
        "attrs": {},
        "amount": "-0.01",
        "at": "1900-01-01T00:00:00Z",
        "day": "0001-01-01",
    },
]


def data_version(df: DataFrame, folder: Path, **options: str) -> str:
    df.write.options(**options).parquet(str(folder))
    return seal(Lake(folder.parent), folder, ".parquet").data_version


def numbers(spark: SparkSession, partitions: int = 3) -> DataFrame:
    """Rows in a fixed order over several partitions, with nulls, decimals and timestamps."""
    return spark.range(0, 3000, numPartitions=partitions).select(
        F.col("id"),
        F.when(F.col("id") % 7 == 0, None).otherwise(F.concat(F.lit("name "), F.col("id"))).alias("name"),
        (F.col("id") / 4).cast("decimal(12,2)").alias("amount"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("at"),
        (F.col("id") * 1.5).alias("score"),
    )


def column_digests(array: pa.Array) -> list[bytes]:
    """The digests of one column holding `array`, fed as hashing a file feeds it."""
    column = content._column(array.type, iter([False]))
    content._feed(column, array)
    return list(column.digests())


def file_hashes(folder: Path) -> set[str]:
    return {sha256_file(part) for part in folder.glob("part-*")}


@contextmanager
def spark_conf(spark: SparkSession, **settings: str) -> Iterator[None]:
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def nested(spark: SparkSession, source: Path, records: list[dict]) -> DataFrame:
    """JSON lines read with struct, array and map columns."""
    source.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return spark.read.schema(NESTED).json(str(source))


def test_the_same_rows_split_into_other_files_and_row_groups_give_the_same_data_version(spark, tmp_path):
    three_files = data_version(numbers(spark), tmp_path / "three")
    one_file = data_version(numbers(spark).coalesce(1), tmp_path / "one")
    many_small = data_version(
        numbers(spark, 1), tmp_path / "many", maxRecordsPerFile="700", **{"parquet.block.size": "4096"}
    )
    assert len(list((tmp_path / "many").glob("part-*"))) == 5
    assert pq.read_metadata(tmp_path / "many" / "part-00000.parquet").num_row_groups > 1
    assert three_files == one_file == many_small


def test_compression_encodings_timestamp_storage_and_the_writer_do_not_change_the_data_version(spark, tmp_path):
    spark_default = data_version(numbers(spark), tmp_path / "snappy")
    with spark_conf(spark, **{"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}):
        plain_gzip = data_version(
            numbers(spark), tmp_path / "gzip", compression="gzip", **{"parquet.enable.dictionary": "false"}
        )
    table = pq.read_table(tmp_path / "snappy")
    (tmp_path / "arrow").mkdir()
    pq.write_table(
        table,
        tmp_path / "arrow" / "rows.parquet",
        row_group_size=100,
        compression="zstd",
        use_deprecated_int96_timestamps=True,
        data_page_version="2.0",
    )
    arrow_written = seal(Lake(tmp_path), tmp_path / "arrow", ".parquet").data_version
    assert pq.read_schema(tmp_path / "gzip" / "part-00000.parquet").field("at").type == pa.timestamp("us", "UTC")
    assert file_hashes(tmp_path / "snappy").isdisjoint(file_hashes(tmp_path / "gzip"))
    assert spark_default == plain_gzip == arrow_written


def test_a_changed_value_gives_another_data_version(spark, tmp_path):
    changed = numbers(spark).withColumn("score", F.when(F.col("id") == 2999, 0.0).otherwise(F.col("score")))
    assert data_version(numbers(spark), tmp_path / "a") != data_version(changed, tmp_path / "b")


def test_another_row_order_gives_another_data_version(spark, tmp_path):
    backwards = numbers(spark).orderBy(F.col("id").desc())
    assert data_version(numbers(spark), tmp_path / "a") != data_version(backwards, tmp_path / "b")


def test_another_column_type_gives_another_data_version(spark, tmp_path):
    as_int = numbers(spark).withColumn("id", F.col("id").cast("int"))
    assert data_version(numbers(spark), tmp_path / "a") != data_version(as_int, tmp_path / "b")


def test_another_column_name_gives_another_data_version(spark, tmp_path):
    renamed = numbers(spark).withColumnRenamed("score", "points")
    assert data_version(numbers(spark), tmp_path / "a") != data_version(renamed, tmp_path / "b")


def test_another_nullability_gives_another_data_version(spark, tmp_path):
    required = spark.range(0, 100).select(F.col("id"))
    nullable = spark.range(0, 100).select(F.when(F.col("id") >= 0, F.col("id")).alias("id"))
    assert [f.nullable for f in required.schema] == [False] and [f.nullable for f in nullable.schema] == [True]
    assert data_version(required, tmp_path / "a") != data_version(nullable, tmp_path / "b")


def test_a_null_is_neither_zero_nor_an_empty_string(spark, tmp_path):
    rows = spark.createDataFrame([(0, ""), (None, None)], "n int, s string")
    nulls = spark.createDataFrame([(None, None), (None, None)], "n int, s string")
    zero_and_empty = spark.createDataFrame([(0, ""), (0, "")], "n int, s string")
    versions = {
        data_version(df.coalesce(1), tmp_path / name) for name, df in (("r", rows), ("n", nulls), ("z", zero_and_empty))
    }
    assert len(versions) == 3


def test_the_bytes_a_null_string_points_at_are_not_hashed():
    """Arrow lets a null slot keep bytes (a null struct's fields do): the null hashes as any null."""
    values = pa.array(["ab", "cd", "ef"])
    validity = pa.array([True, False, True]).buffers()[1]
    null_keeping_bytes = pa.Array.from_buffers(pa.string(), 3, [validity, *values.buffers()[1:]], null_count=1)
    assert null_keeping_bytes.to_pylist() == ["ab", None, "ef"]
    assert column_digests(null_keeping_bytes) == column_digests(pa.array(["ab", None, "ef"]))
    assert column_digests(null_keeping_bytes) != column_digests(values)


def test_known_rows_keep_the_data_version_their_scheme_gave_them(tmp_path):
    """Committed versions keep their data_version: the same rows must hash to it under its scheme
    for good, nulls at the top level and inside structs and lists included."""
    user = pa.struct([("name", pa.string()), ("tags", pa.list_(pa.string()))])
    table = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "note": pa.array(["a", None, "ccc", None]),
            "user": pa.array(
                [{"name": "ann", "tags": ["x", None]}, None, {"name": None, "tags": []}, {"name": "bo", "tags": None}],
                user,
            ),
        }
    )
    pq.write_table(table.slice(0, 3), tmp_path / "part-0.parquet")
    pq.write_table(table.slice(3), tmp_path / "part-1.parquet")
    content = digest_parquet([tmp_path / "part-0.parquet", tmp_path / "part-1.parquet"])
    assert content.digest == "b3adec70d77756bd56b001a90751b7c97991ec29d62da894200eaea6bdae936b"


def test_nested_decimal_and_timestamp_columns_hash_alike_however_split(spark, tmp_path):
    rows = nested(spark, tmp_path / "records.json", RECORDS)
    whole = data_version(rows.coalesce(1), tmp_path / "one")
    split = data_version(rows, tmp_path / "split", maxRecordsPerFile="1")
    assert len(list((tmp_path / "split").glob("part-*"))) == 3
    assert whole == split


def test_a_change_inside_a_nested_value_gives_another_data_version(spark, tmp_path):
    older = [dict(RECORDS[0], user={"name": "ann", "age": 30}), *RECORDS[1:]]
    list_moved = [dict(RECORDS[0], tags=["a"]), dict(RECORDS[1], tags=["b"]), *RECORDS[2:]]
    null_user = [RECORDS[0], RECORDS[1], dict(RECORDS[2], user=None)]
    map_entry = [dict(RECORDS[0], attrs={"x": 1, "y": 3}), *RECORDS[1:]]
    variants = [RECORDS, older, list_moved, null_user, map_entry]
    versions = {
        data_version(nested(spark, tmp_path / f"v{i}.json", v).coalesce(1), tmp_path / f"v{i}")
        for i, v in enumerate(variants)
    }
    assert len(versions) == len(variants)


def test_an_empty_version_is_identified_by_its_schema(spark, tmp_path):
    empty = data_version(numbers(spark).filter("id < 0"), tmp_path / "a")
    also_empty = data_version(numbers(spark).filter("id < 0").coalesce(1), tmp_path / "b")
    other_schema = data_version(numbers(spark).filter("id < 0").drop("score"), tmp_path / "c")
    assert empty == also_empty != other_schema


def test_each_sealed_file_keeps_the_sha256_of_its_bytes(spark, tmp_path):
    numbers(spark).write.parquet(str(tmp_path / "a"))
    sealed = seal(Lake(tmp_path), tmp_path / "a", ".parquet")
    assert [(f.path, f.sha256) for f in sealed.files] == [
        (name, sha256_file(tmp_path / "a" / name))
        for name in ("part-00000.parquet", "part-00001.parquet", "part-00002.parquet")
    ]
    assert sealed.rows == 3000


def test_files_read_whole_from_another_file_system_hash_as_memory_mapped_ones_do(spark, tmp_path):
    numbers(spark).write.parquet(str(tmp_path / "a"))
    paths = sorted((tmp_path / "a").glob("part-*.parquet"))
    store = pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem())  # as an object store's are read
    through_store = digest_parquet([PurePosixPath(path.relative_to(tmp_path)) for path in paths], store)
    assert len(paths) == 3 and through_store == digest_parquet(paths)


def test_hashing_counts_the_rows_null_in_each_column_across_files(tmp_path):
    pq.write_table(pa.table({"id": [1, 2], "note": ["a", None]}), tmp_path / "part-0.parquet")
    pq.write_table(
        pa.table({"id": [3, None], "note": pa.array([None, None], pa.string())}), tmp_path / "part-1.parquet"
    )
    content = digest_parquet([tmp_path / "part-0.parquet", tmp_path / "part-1.parquet"])
    assert content.nulls == {"id": 1, "note": 3}


def test_a_batch_ingested_again_with_force_and_split_otherwise_has_the_same_data_version(
    spark, catalog, lake, test_specs
):
    lines = ["id,name,score", *(f"{i},name {i},{i / 4}" for i in range(20_000))]
    batch = ("\n".join(lines) + "\n").encode()
    spec = test_specs[AssetKey.parse("t/people")]
    drop(lake, "t/people", "b1", {"p.csv": batch})
    first = ingest(spark, catalog, lake, spec, BOB, batch_id="b1")
    with spark_conf(spark, **{"spark.sql.files.maxPartitionBytes": "65536"}):
        again = ingest(spark, catalog, lake, spec, BOB, batch_id="b1", force=True)
    assert len(list(lake.at(again.path).glob("part-*"))) > len(list(lake.at(first.path).glob("part-*")))
    assert (again.number, again.data_version) == (2, first.data_version)


def test_a_materialization_run_again_on_the_same_inputs_has_the_same_data_version(spark, catalog, lake, demo_specs):
    """product_summary ends with an orderBy: its rows come out in the same order however partitioned."""
    demo = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], BOB, batch_id=demo.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], BOB, batch_id=demo.client_batches[0])
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], BOB)
    first = materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], BOB).version
    # Under another code version: the same one would make no new version (nor files to compare).
    rebuilt = replace(BOB, code_version="rebuilt")
    with spark_conf(spark, **{"spark.sql.adaptive.enabled": "false", "spark.sql.shuffle.partitions": "3"}):
        again = materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], rebuilt).version
    assert len(list(lake.at(again.path).glob("part-*"))) != len(list(lake.at(first.path).glob("part-*")))
    assert (again.number, again.data_version) == (2, first.data_version)
