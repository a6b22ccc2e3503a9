"""The schema Spark infers from JSON texts a DataFrame already holds."""

from __future__ import annotations

import json
from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType


def inferred_schema(texts: DataFrame, options: Mapping[str, str]) -> StructType:
    """The schema Spark's JSON reader infers from `texts`, one string column of JSON documents,
    with the reader's `options`. PySpark's reader takes files or an RDD, whose every record would
    pass through a Python worker and back; Spark's own reader takes the column as it is, so it is
    read in one pass in the JVM, with nothing written first."""
    jvm = texts.sparkSession._jvm
    assert jvm is not None  # a session of this process's own JVM, not a Spark Connect client's
    strings = getattr(texts._jdf, "as")(jvm.org.apache.spark.sql.Encoders.STRING())
    reader = texts.sparkSession._jsparkSession.read()
    for name, value in options.items():
        reader = reader.option(name, value)
    return StructType.fromJson(json.loads(reader.json(strings).schema().json()))
