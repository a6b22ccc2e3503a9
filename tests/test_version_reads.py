"""A committed version read as a Spark DataFrame, given the schema it was written with: Spark finds
the same columns, types and rows as when it reads the schema from the version's files, without a
job of its own to read a footer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from pyspark.sql import SparkSession

from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.catalog.states import VersionStatus
from governance.demo import CLIENTS, NAMES_AND_PRODUCTS, PRODUCT_SUMMARY, PRODUCTS, drop_demo_batches
from governance.errors import IntegrityError
from governance.ingest import ingest
from governance.integrate import materialize
from governance.runs import RunRequest
from governance.versions import read_dataframe
from governance.zones import Lake
from tests.helpers import assert_reads_as_inferred, inferred

BOB = RunRequest(requested_by="bob", run_id="run-1")


@contextmanager
def spark_jobs(spark: SparkSession) -> Iterator[list[int]]:
    """The ids of the Spark jobs the block runs, filled in when it ends."""
    context, jobs, group = spark.sparkContext, [], f"custody-test-{uuid.uuid4()}"
    context.setJobGroup(group, "the jobs of one read")
    try:
        yield jobs
    finally:
        jobs.extend(context.statusTracker().getJobIdsForGroup(group))
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]  # unset


def written(spark: SparkSession, lake: Lake) -> VersionRow:
    """Five rows of nested, decimal, timestamp, described and automatically named columns, all of
    them written as non-nullable, which a file gives back as nullable."""
    frame = spark.sql(
        "SELECT id, id * 2, CAST(id AS DECIMAL(12, 2)) AS amount, TIMESTAMP'2026-11-28 09:00:00' AS at, "
        "TIMESTAMP_NTZ'2026-11-28 09:00:00' AS local_at, "
        "named_struct('name', CAST(id AS STRING), 'tags', array(id, id + 1)) AS user, map('k', id) AS attrs "
        "FROM range(5)"
    ).withMetadata("id", {"comment": "the row's number"})
    frame.write.parquet(str(lake.root / "written"))
    return VersionRow(path="written", rows=5, table_schema=frame.schema.json())  # type: ignore[call-arg]  # checks none


def test_nested_decimal_timestamp_and_described_columns_read_as_spark_finds_them_in_the_files(spark, lake):
    row = written(spark, lake)
    assert_reads_as_inferred(spark, lake, row)
    assert read_dataframe(spark, lake, row).schema["id"].metadata == {"comment": "the row's number"}


def test_a_version_is_read_without_a_spark_job(spark, lake):
    row = written(spark, lake)
    with spark_jobs(spark) as inferring:
        inferred(spark, lake, row)
    with spark_jobs(spark) as reading:
        read_dataframe(spark, lake, row)
    assert inferring and not reading


def test_a_version_whose_files_are_gone_is_refused_not_read_as_empty(spark, lake):
    row = written(spark, lake)
    for part in (lake.root / "written").glob("part-*"):
        part.unlink()
    with pytest.raises(IntegrityError, match="holds 5 rows, but written in the lake has none of its files"):
        read_dataframe(spark, lake, row)


def test_the_demo_versions_read_as_spark_finds_them_in_their_files(spark, catalog: Catalog, lake, demo_specs):
    demo = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], BOB, batch_id=demo.products_batch)
    ingest(spark, catalog, lake, demo_specs[CLIENTS], BOB, batch_id=demo.client_batches[0])
    materialize(spark, catalog, lake, demo_specs[NAMES_AND_PRODUCTS], BOB)
    materialize(spark, catalog, lake, demo_specs[PRODUCT_SUMMARY], BOB)

    rows = [row for spec in demo_specs for row in catalog.versions(spec.key) if row.status == VersionStatus.COMMITTED]

    assert len(rows) == 4
    for row in rows:
        assert_reads_as_inferred(spark, lake, row)
