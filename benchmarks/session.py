"""The Spark session benchmarks run on: Custody's own settings (resources.spark), so that the
governed path does all it does in production, and the bare baseline runs beside it in the same JVM."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import SparkSession

from resources.spark import session_conf


def custody_session(jars: Iterable[str | Path] = ()) -> SparkSession:
    """A local[2] session as Custody configures its own, with `jars` on its class path."""
    conf = session_conf(
        "local[2]",
        {"spark.app.name": "custody-bench", "spark.driver.memory": "4g"},
        jars=tuple(str(jar) for jar in jars),
    )
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
