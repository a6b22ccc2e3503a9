"""Governed ingestion of a database table or query: one snapshot read, checked, quarantined and
committed as the landing asset's next version, with the read's marks recorded on it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass

from pyspark.sql import SparkSession

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.models import RelationalRead, VersionRow
from governance.errors import CustodyError
from governance.ingest import ingestion_requested, landing_draft, settle, write_good
from governance.lineage.openlineage import Dataset, Emitter, JobRun, column_inputs, dataset_of
from governance.lineage.versioned import (
    DEFAULT_COLUMNS,
    ColumnOptions,
    relational_columns,
    warn_about,
)
from governance.relational import (
    Credentials,
    ReadPlan,
    Snapshot,
    credentials,
    parse,
    plan_read,
    read,
    snapshot,
    talking_to,
)
from governance.repair import repair
from governance.runs import Progress, RunRequest, attempt, quiet, record_failure
from governance.sources import Place
from governance.spec import JdbcSource, Spec
from governance.versions import commit
from governance.zones import Lake


def ingest_table(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    request: RunRequest,
    *,
    progress: Progress = quiet,
    events: Emitter | None = None,
    column_lineage: ColumnOptions | None = DEFAULT_COLUMNS,
    environ: Mapping[str, str] | None = None,
) -> VersionRow:
    """Land the rows of the spec's table or query (those past the last version's high-water mark,
    when it reads incrementally) as its next version."""
    source = spec.database_source
    events = events or Emitter.off()
    place = Place.of(source)
    repair(catalog, lake)
    since = catalog.last_mark(spec.key, source.incremental.column, place.name) if source.incremental else None
    ingestion_requested(catalog, spec, request, {"source": place.namespace, "dataset": place.name, "since": since})
    where = f"{spec.key} reads {place.name}"
    with ExitStack() as held:
        try:
            login = credentials(spec, os.environ if environ is None else environ)
            progress(f"taking a snapshot of {place.url}")
            snap = held.enter_context(snapshot(spark, place, login, where))
            with talking_to(place, login):
                plan = plan_read(snap, source, since, place.name)
        except CustodyError as err:
            record_failure(catalog, spec.key, request, ledger.Action.INGESTION_FAILED, err, {"dataset": place.name})
            raise
        if plan.rows_without_mark and source.incremental:
            progress(
                f"warning: {plan.rows_without_mark} row(s) of {place.name} have no {source.incremental.column}; "
                "an incremental read never reaches them"
            )
        return _land(
            spark,
            catalog,
            lake,
            spec,
            source,
            request,
            Reading(place, login, snap, plan),
            progress=progress,
            events=events,
            column_lineage=column_lineage,
        )


@dataclass(frozen=True)
class Reading:
    """A read about to start: where, as whom, in which snapshot, which rows."""

    place: Place
    login: Credentials
    snap: Snapshot
    plan: ReadPlan


def _land(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    source: JdbcSource,
    request: RunRequest,
    reading: Reading,
    *,
    progress: Progress,
    events: Emitter,
    column_lineage: ColumnOptions | None,
) -> VersionRow:
    place, snap, plan = reading.place, reading.snap, reading.plan
    table = Dataset(place.name, snap.taken_at.isoformat(), namespace=place.namespace)
    job = JobRun(str(spec.key), "INGESTION", request, [table])
    with (
        events.running(job, progress) as outputs,
        attempt(catalog, lake, spec.key, request, ledger.Action.INGESTION_FAILED) as (attempt_id, stage),
    ):
        progress(f"reading {place.name} as of {snap.taken_at.isoformat()}{_range(source, plan)}, writing Parquet")
        with talking_to(place, reading.login):
            parsed = parse(read(spark, source, place, reading.login, snap, plan), spec, place)
            write_good(spark, parsed, stage)
            landed = settle(spark, spec, parsed, stage, f"read of {place.name}")
        columns = relational_columns(landed.frame, column_lineage) if column_lineage else None
        warn_about(columns, progress)
        quarantined = landed.quarantined.rows if landed.quarantined else 0
        progress(f"committing {landed.data.rows} rows ({quarantined} quarantined)")
        draft = landing_draft(spec, request, attempt_id, landed, columns, read=_record(source, reading))
        row = commit(catalog, lake, stage, draft, progress)
        outputs.add(dataset_of(lake, row, spec.body.roles.model_dump(), column_inputs(columns, {None: table})))
    return row


def _range(source: JdbcSource, plan: ReadPlan) -> str:
    if not source.incremental:
        return ""
    start = f"after {plan.since} " if plan.since else ""
    return f", {source.incremental.column} {start}up to {plan.until}"


def _record(source: JdbcSource, reading: Reading) -> RelationalRead:
    place, snap, plan = reading.place, reading.snap, reading.plan
    # SQLModel's types ask for every field, though a table model checks none when built: the version
    # id and asset key are set when the version is recorded (`governance.versions`).
    return RelationalRead(  # type: ignore[call-arg]
        namespace=place.namespace,
        name=place.name,
        url=place.url,
        snapshot_at=snap.taken_at,
        table_name=source.table,
        query=source.statement or None,
        incremental_column=source.incremental.column if source.incremental else None,
        high_water_from=plan.since,
        high_water_to=plan.until,
        rows_without_mark=plan.rows_without_mark,
        partition_column=source.partition_column if plan.bounds else None,
        partitions=plan.partitions if plan.bounds else 1,
    )
