"""Row counts Spark measured anyway: the SQL metrics of a query, found by its job description."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from governance.errors import IntegrityError

OUTPUT_ROWS = "number of output rows"
RECORDED_WITHIN_SECONDS = 30


@contextmanager
def described(spark: SparkSession, description: str, tag: str | None = None) -> Iterator[None]:
    """Run the block's Spark queries under a job description, to find their metrics afterwards,
    and a tag another thread may cancel them by."""
    context = spark.sparkContext
    context.setJobDescription(description)
    if tag:
        context.addJobTag(tag)
    try:
        yield
    finally:
        if tag:
            context.removeJobTag(tag)
        context.setJobDescription(None)  # type: ignore[arg-type]


def rows_scanned(spark: SparkSession, description: str) -> int:
    """Rows produced by the file scans of the last query run under `description`."""
    _recorded(spark, description)
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    for index in range(executions.size() - 1, -1, -1):
        execution = executions.apply(index)
        if execution.description() == description:
            return _scan_rows(store, execution.executionId())
    raise IntegrityError(f"Spark kept no metrics for query {description!r}; cannot check the row counts")


def _recorded(spark: SparkSession, description: str) -> None:
    """Wait until Spark's listeners have taken every event posted so far. A query has posted its
    tasks' and its own end when it returns, but the listener that keeps its metrics takes them on a
    thread of its own: read before, the scans' counts may be missing, and read as none."""
    try:
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(RECORDED_WITHIN_SECONDS * 1000)
    except Py4JJavaError as err:
        raise IntegrityError(
            f"Spark did not record the metrics of query {description!r} within {RECORDED_WITHIN_SECONDS} s; "
            "cannot check the row counts"
        ) from err


def _scan_rows(store, execution_id: int) -> int:
    values = store.executionMetrics(execution_id)
    total, scans = 0, 0
    nodes = store.planGraph(execution_id).allNodes().iterator()
    while nodes.hasNext():
        node = nodes.next()
        if not node.name().startswith("Scan "):
            continue
        scans += 1
        metrics = node.metrics().iterator()
        while metrics.hasNext():
            metric = metrics.next()
            value = values.get(metric.accumulatorId())
            if metric.name() == OUTPUT_ROWS and value.isDefined():
                total += int(re.sub(r"\D", "", value.get()) or 0)
    if not scans:
        raise IntegrityError(f"Spark execution {execution_id} has no file scan; cannot check the row counts")
    return total
