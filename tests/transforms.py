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


def needs_a_first_row(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """Each input's first row read at once, as a transform that looks up a value does: it fails on
    an input without rows."""
    for frame in inputs.values():
        frame.first()[0]
    return next(iter(inputs.values()))


def fails(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """A transform whose plan does not resolve."""
    return next(iter(inputs.values())).select("no_such_column")


def reads_an_extra_path_in_a_subquery(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input, filtered by a scalar subquery over EXTRA_PATH["path"]."""
    first = next(iter(inputs.values()))
    first.createOrReplaceTempView("first_input")
    spark.read.parquet(EXTRA_PATH["path"]).createOrReplaceTempView("extra_input")
    return spark.sql("SELECT * FROM first_input WHERE (SELECT COUNT(*) FROM extra_input) > 0")


def joins_a_cached_extra_path(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """Like joins_an_extra_path, with the extra read cached first."""
    first = next(iter(inputs.values()))
    extra = spark.read.parquet(EXTRA_PATH["path"]).cache()
    return first.crossJoin(extra.limit(1).select(extra.columns[0]).withColumnRenamed(extra.columns[0], "extra"))


def through_pandas(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input's product ids and names, passed through pandas: a plan node without a lineage rule."""
    first = next(iter(inputs.values())).select("product_id", "product_name")
    return first.mapInPandas(lambda batches: batches, first.schema)


def with_a_constant(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input's product ids, with a column that reads no input."""
    from pyspark.sql import functions as F

    return next(iter(inputs.values())).select("product_id", F.lit("shop").alias("source"))


def names_or_unnamed(spark: SparkSession, **inputs: DataFrame) -> DataFrame:
    """The first input's product ids, each with its product's name or, where it has none, "unnamed"."""
    from pyspark.sql import functions as F

    first = next(iter(inputs.values()))
    return first.select("product_id", F.coalesce("product_name", F.lit("unnamed")).alias("label"))


def nests_the_client(spark: SparkSession, clients: DataFrame, products: DataFrame) -> DataFrame:
    """Each order with its client's names in one struct column."""
    from pyspark.sql import functions as F

    return clients.select(F.struct("name", "surname").alias("client"), F.col("order__quantity").alias("quantity"))


def reads_a_nested_field(spark: SparkSession, names_and_products: DataFrame) -> DataFrame:
    """The first name, read from inside the client struct."""
    from pyspark.sql import functions as F

    return names_and_products.select(F.col("client.name").alias("first_name"))
