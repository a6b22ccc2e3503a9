"""A lazily started SparkSession, with the master from CUSTODY_SPARK_MASTER and a deployment's
settings from CUSTODY_SPARK_CONF."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr
from pyspark.sql import SparkSession

from governance.config import Settings
from governance.lake import lake_spark_conf
from governance.runtime import require_java
from governance.spark.conf import code_archive, spark_conf

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
DEFAULT_CONF = {
    "spark.app.name": "custody",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # UTC in the JVMs too: the JDBC driver reads a `timestamp without time zone` in the JVM's zone.
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG_CONFIG} -Duser.timezone=UTC",
    "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # Timestamps as Parquet's INT64 microseconds, the form Iceberg reads, rather than Spark's INT96:
    # a version's files become its table snapshot as they are. The data_version is the same for both.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def session_conf(
    master: str,
    extra: dict[str, Any] | None = None,
    deployment: dict[str, str] | None = None,
    jars: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Spark settings for Custody: ours, then the `deployment`'s (CUSTODY_SPARK_CONF), then `extra`.
    `jars` (the JDBC driver) join any the deployment names; Spark ships them to the executors.
    Python workers run this interpreter unless PYSPARK_PYTHON or the deployment names another."""
    settings = {**DEFAULT_CONF, **(deployment or {}), "spark.master": master, **(extra or {})}
    named = [jar for jar in str(settings.get("spark.jars") or "").split(",") if jar]
    if jars:
        settings["spark.jars"] = ",".join(dict.fromkeys([*named, *jars]))
    # PySpark takes the workers' interpreter from the environment only, local or on a cluster's
    # executors (at the same path on every host); without it they start whatever `python3` is on
    # their PATH, outside this virtual environment.
    os.environ.setdefault("PYSPARK_PYTHON", settings.get("spark.pyspark.python") or sys.executable)
    return settings


def is_local(master: str) -> bool:
    return master.startswith("local")


class SparkResource(dg.ConfigurableResource):
    """The SparkSession assets run on; started on first use, after checking for Java 17."""

    master: str | None = None
    # Set in code only (tests, benchmarks): the code location's Spark takes its settings from the environment.
    spark_config: dict[str, Any] = Field(default_factory=dict)
    _session: SparkSession | None = PrivateAttr(default=None)

    def session(self, log: Callable[[str], None]) -> SparkSession:
        """The session, saying so when it has to be started (that takes seconds)."""
        self._forget_stopped()
        if self._session is None and SparkSession.getActiveSession() is None:
            log(f"starting Spark ({self.master or Settings.from_env().spark_master})")
        return self.spark_session

    @property
    def spark_session(self) -> SparkSession:
        """The session, started on first use (or the process's active one, which Spark hands back)."""
        self._forget_stopped()
        if self._session is None:
            require_java()
            settings = Settings.from_env()
            master = self.master or settings.spark_master
            # A deployment's own settings win over those that reach the lake.
            deployment = {**lake_spark_conf(settings), **spark_conf(settings.spark_conf)}
            conf = session_conf(master, self.spark_config, deployment, settings.spark_jars())
            session = SparkSession.builder.config(map={key: str(value) for key, value in conf.items()}).getOrCreate()
            if not is_local(master):
                ship_code(session, settings)
            self._session = session
        return self._session

    def _forget_stopped(self) -> None:
        """One resource serves every run of its process: a session stopped since is started anew."""
        if self._session is not None and self._session.sparkContext._jsc is None:
            self._session = None


def ship_code(session: SparkSession, settings: Settings) -> None:
    """Put the project's packages on the executors' Python path, once per application: the
    quarantine's explanations and transforms' UDFs import them there."""
    archive = code_archive(settings.cache_dir / "spark", ("governance", *settings.transform_packages))
    context = session.sparkContext
    if archive.name not in (context._python_includes or []):  # the archives addPyFile has shipped
        context.addPyFile(str(archive))
