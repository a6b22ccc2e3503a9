"""A lazily started SparkSession, built on dagster-pyspark, with the master from CUSTODY_SPARK_MASTER."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagster_pyspark import LazyPySparkResource
from dagster_pyspark.resources import spark_session_from_config
from pyspark.sql import SparkSession

from governance.config import Settings
from governance.runtime import require_java

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
DEFAULT_CONF = {
    "spark.app.name": "custody",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG}",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
}


def session_conf(master: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Spark settings for Custody; on a local master, Python workers run this interpreter."""
    if master.startswith("local"):
        # PySpark reads the worker interpreter from the environment only; without this, UDF
        # workers start whatever `python3` is on PATH, outside this virtual environment.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return {**DEFAULT_CONF, "spark.master": master, **(extra or {})}


class SparkResource(LazyPySparkResource):
    """The SparkSession assets run on; started on first use, after checking for Java 17."""

    master: str | None = None
    spark_config: dict[str, Any] = {}

    def session(self, log: Callable[[str], None]) -> SparkSession:
        """The session, saying so when it has to be started (that takes seconds)."""
        # Each run gets a fresh copy of the resource, but the JVM's session outlives it.
        if self._spark_session is None and SparkSession.getActiveSession() is None:
            log(f"starting Spark ({self.master or Settings.from_env().spark_master})")
        return self.spark_session

    def _init_session(self) -> None:
        if self._spark_session is None:
            require_java()
            master = self.master or Settings.from_env().spark_master
            self._spark_session = spark_session_from_config(session_conf(master, self.spark_config))
