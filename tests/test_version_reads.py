"""A committed version read as a Spark DataFrame, given the schema it was written with: Spark finds
the same columns, types and rows as when it reads the schema from the version's files."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from governance.access.reads import read_dataframe
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.catalog.states import VersionStatus
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCT_SUMMARY, PRODUCTS, drop_demo_batches
from governance.ingest import ingest
from governance.integrate import materialize
from governance.runs import RunRequest
from governance.zones import Lake

BOB = RunRequest(requested_by="bob", run_id="run-1")


def inferred(spark: SparkSession, lake: Lake, row: VersionRow) -> DataFrame:
    return spark.read.parquet(lake.uri(lake.at(row.path)))


def test_nested_decimal_timestamp_and_described_columns_read_as_spark_finds_them_in_the_files(spark, lake):
    frame = spark.sql(
        "SELECT id, CAST(id AS DECIMAL(12, 2)) AS amount, TIMESTAMP'2026-11-28 09:00:00' AS at, "
        "TIMESTAMP_NTZ'2026-11-28 09:00:00' AS local_at, "
        "named_struct('name', CAST(id AS STRING), 'tags', array(id, id + 1)) AS user, map('k', id) AS attrs "
        "FROM range(5)"
    ).withMetadata("id", {"comment": "the row's number"})
    frame.write.parquet(str(lake.root / "written"))
    # Written with non-nullable columns, which a file gives back as nullable.
    row = VersionRow(path="written", table_schema=frame.schema.json())  # type: ignore[call-arg]  # checks none

    given, found = read_dataframe(spark, lake, row), inferred(spark, lake, row)

    assert given.schema == found.schema and given.schema.fields[0].metadata == {"comment": "the row's number"}
    assert given.collect() == found.collect()


def test_the_demo_versions_read_as_spark_finds_them_in_their_files(spark, catalog: Catalog, lake, demo_specs):
    demo = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], BOB, batch_id=demo.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], BOB, batch_id=demo.client_batches[0])
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], BOB)
    materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], BOB)

    rows = [row for spec in demo_specs for row in catalog.versions(spec.key) if row.status == VersionStatus.COMMITTED]

    assert len(rows) == 4
    for row in rows:
        given, found = read_dataframe(spark, lake, row), inferred(spark, lake, row)
        assert given.schema == found.schema, row.ref
        assert given.collect() == found.collect(), row.ref
