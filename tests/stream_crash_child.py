"""Land a streamed asset once, for tests/test_streams_landing.py, which kills it at a random moment.

Usage: stream_crash_child.py HOME SPECS. The broker and the landing account are the environment's
(`CUSTODY_KAFKA_*`); HOME/started is written once Spark is up, just before the landing begins.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession

from governance.catalog import Catalog
from governance.config import Settings
from governance.lake import lake_spark_conf, open_lake
from governance.runs import RunRequest
from governance.spec import load_specs
from governance.streams.landing import land_topic
from resources.spark import session_conf


def main() -> None:
    home, specs = Path(sys.argv[1]), Path(sys.argv[2])
    settings = replace(Settings.from_env({**os.environ, "CUSTODY_HOME": str(home)}), specs_approval="off")
    builder = SparkSession.builder
    for key, value in session_conf("local[2]", lake_spark_conf(settings), jars=settings.spark_jars()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spec = next(iter(load_specs(specs, transform_packages=settings.transform_packages)))
    (home / "started").write_text("yes")
    land_topic(spark, Catalog.from_url(settings.catalog_url), open_lake(settings), spec, RunRequest("svc-custody"))


if __name__ == "__main__":
    main()
