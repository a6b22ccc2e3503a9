"""Transforms used by test specs."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession


def passthrough(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input, unchanged."""
    return next(iter(inputs.values()))


# Set by tests that make a transform read a path the spec does not name.
EXTRA_PATH: dict[str, str] = {}


def joins_an_extra_path(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input, joined with whatever EXTRA_PATH["path"] holds: a read the spec does not declare."""
    first = next(iter(inputs.values()))
    extra = spark.read.parquet(EXTRA_PATH["path"])
    return first.crossJoin(extra.limit(1).select(extra.columns[0]).withColumnRenamed(extra.columns[0], "extra"))


def fails(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """A transform whose plan does not resolve."""
    return next(iter(inputs.values())).select("no_such_column")
