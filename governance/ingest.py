"""Governed ingestion of one DropZone batch with PySpark: read, validate, quarantine, write, commit."""

from __future__ import annotations

import csv
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from governance import ledger
from governance.access.settings import pinned_os_users
from governance.batches import (
    Batch,
    BatchScan,
    check_unchanged,
    first_line,
    open_batch,
    scan_batch,
)
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.dropzone import next_batch
from governance.errors import (
    BatchError,
    CustodyError,
    DuplicateBatch,
    IntegrityError,
    InvalidInput,
    ValidationFailed,
)
from governance.lineage.openlineage import Dataset, Emitter, JobRun, column_inputs, dataset_of
from governance.lineage.versioned import DEFAULT_COLUMNS, ColumnOptions, VersionColumns, landing_columns, warn_about
from governance.readers import Parsed, RowCount, TextChecks, column_difference, read_batch
from governance.repair import repair
from governance.runs import Progress, RunRequest, attempt, quiet, record_failure
from governance.spark.errors import reading
from governance.spark.metrics import described, rows_scanned
from governance.spec import Spec
from governance.versions import Draft, Sealed, commit, seal
from governance.zones import Lake, Staging, Zone

SAMPLE_SIZE = 3


def ingest(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    request: RunRequest,
    *,
    batch_id: str | None = None,
    force: bool = False,
    progress: Progress = quiet,
    events: Emitter | None = None,
    column_lineage: ColumnOptions | None = DEFAULT_COLUMNS,
) -> VersionRow:
    """Land one ready batch of a landing asset as its next version, with the DropZone field each
    column comes from unless `column_lineage` is None. An asset read from a database or a Kafka
    topic has no batches: its table or query, or its topic's records since its last version, are read instead."""
    if spec.reads_database or spec.reads_topic:
        if batch_id is not None or force:
            source = "read from a database" if spec.reads_database else "landed from a Kafka topic"
            raise InvalidInput(f"{spec.key} is {source}, not from DropZone batches: it takes no batch and no --force")
        from governance.ingest_relational import ingest_table
        from governance.streams.landing import land_topic

        read = ingest_table if spec.reads_database else land_topic
        return read(
            spark, catalog, lake, spec, request, progress=progress, events=events, column_lineage=column_lineage
        )
    events = events or Emitter.off()
    repair(catalog, lake)
    batch = _checked_batch(catalog, lake, spec, request, batch_id, force, progress)
    owned = {"batch_owner": batch_owner_in_directory(catalog, batch)}
    ingestion_requested(
        catalog,
        spec,
        request,
        {
            "batch": batch.batch_id,
            **owned,
            "files": len(batch.files),
            "bytes": batch.bytes,
            "batch_requested_by": batch.meta.requested_by,
            "label": batch.meta.label,
            "forced": force,
        },
    )
    seen = frozenset() if force else catalog.batch_fingerprints(spec.key)
    dropped = Dataset(str(batch.path), batch.batch_id, roles=spec.body.roles.model_dump())
    job = JobRun(str(spec.key), "INGESTION", request, [dropped])
    with (
        events.running(job, progress) as outputs,
        attempt(catalog, lake, spec.key, request, ledger.Action.INGESTION_FAILED, owned) as (attempt_id, stage),
    ):
        progress(f"reading {len(batch.files)} file(s), {batch.bytes / 1e6:.1f} MB, writing Parquet")
        with reading([f.path for f in batch.files], spec.file_source.format):
            written = write_while_scanning(spark, spec, batch, stage, stop_if=lambda scan: scan.fingerprint in seen)
            _refuse_same_files(catalog, spec, written.scan, force)
            landed = land(spark, spec, written, stage)
        columns = (
            landing_columns(landed.frame, column_lineage, [f.path for f in batch.files]) if column_lineage else None
        )
        warn_about(columns, progress)
        quarantined = landed.quarantined.rows if landed.quarantined else 0
        controls = [c.to_dict() for c in written.scan.controls]
        if controls:
            where = ", ".join(f"{c['file']} line {c['line']} ({c['character']})" for c in controls)
            progress(f"control characters, whose rows are quarantined, first at {where}")
        check_unchanged(batch)
        notes = written.parsed.notes
        for note in notes:
            progress(f"note: {note}")
        progress(f"committing {landed.data.rows} rows ({quarantined} quarantined)")
        draft = landing_draft(
            spec,
            request,
            attempt_id,
            landed,
            columns,
            label=batch.meta.label,
            batch=written.scan.record(),
            details={
                **owned,
                **({"control_characters": controls} if controls else {}),
                **({"notes": list(notes)} if notes else {}),
            },
        )
        row = commit(catalog, lake, stage, draft, progress)
        outputs.add(dataset_of(lake, row, spec.body.roles.model_dump(), column_inputs(columns, {None: dropped})))
    return row


def batch_owner_in_directory(catalog: Catalog, batch: Batch) -> str:
    """Whose the batch is, as the `os_users` setting maps its OS user: recorded beside the requester,
    who may be someone else."""
    return pinned_os_users(catalog).get(batch.owner, batch.owner)


def _checked_batch(
    catalog: Catalog, lake: Lake, spec: Spec, request: RunRequest, batch_id: str | None, force: bool, progress: Progress
) -> Batch:
    """The batch to ingest, checked before anything is staged; a refusal is an `ingestion.failed`
    ledger entry with its reason."""
    try:
        batch_id = next_batch(catalog, lake, spec) if batch_id is None else batch_id
        progress(f"checking batch {batch_id} of {spec.key}")
        batch = open_batch(lake, spec.key, batch_id, spec.file_source.format, downloads=spec.feed is not None)
        _refuse_known_batch(catalog, spec, batch, force)
        if spec.file_source.format == "csv" and spec.file_source.header:
            check_csv_headers(spec, batch)
    except CustodyError as err:
        record_failure(
            catalog,
            spec.key,
            request,
            ledger.Action.INGESTION_FAILED,
            err,
            {"batch": batch_id[:200] if batch_id else None},
        )
        raise
    return batch


def _refuse_known_batch(catalog: Catalog, spec: Spec, batch: Batch, force: bool) -> None:
    seen = None if force else catalog.batch_by_id(spec.key, batch.batch_id)
    if seen:
        raise DuplicateBatch(
            f"batch {batch.batch_id!r} was already ingested as {seen[1].ref}; use --force to ingest it again"
        )


def _refuse_same_files(catalog: Catalog, spec: Spec, scan: BatchScan, force: bool) -> None:
    batch = scan.batch
    same = None if force else catalog.batch_by_fingerprint(spec.key, scan.fingerprint)
    if same:
        raise DuplicateBatch(
            f"batch {batch.batch_id!r} has the same files as batch {same[0].batch_id!r}, already ingested as "
            f"{same[1].ref}; use --force to ingest it again"
        )


def check_csv_headers(spec: Spec, batch: Batch) -> None:
    """Refuse, before anything is written, any file whose header is not the declared columns in order."""
    declared = [c.name for c in spec.body.columns]
    for f in batch.files:
        header = next(csv.reader([first_line(f)[0]], delimiter=spec.file_source.delimiter), [])
        header = [h.strip() for h in header]
        if header != declared:
            raise BatchError(
                f"{f.path}: header does not match the spec of {spec.key}: {column_difference(declared, header)}"
            )


@dataclass(frozen=True)
class Written:
    """Good rows written to staging while the batch was scanned. `complete` is false when the scan
    found the write pointless (files already ingested, or not UTF-8): it was cancelled or skipped,
    and nothing in staging can be trusted."""

    parsed: Parsed
    scan: BatchScan
    complete: bool


def write_while_scanning(
    spark: SparkSession, spec: Spec, batch: Batch, stage: Staging, stop_if: Callable[[BatchScan], bool]
) -> Written:
    """Hash the batch in a thread while Spark writes its good rows: the hashing costs no wall time.

    The plan assumes valid UTF-8 without control characters. A scan that finds either, cannot read
    a file, or that `stop_if` refuses (files already ingested) cancels the write as soon as it is known.
    """
    tag = f"custody-{stage.path.name}"
    stopped = threading.Event()

    def stop_when_pointless(scanned: Future[BatchScan]) -> None:
        failed = scanned.exception() is not None
        if failed or TextChecks.needed_by(scanned.result()).any or stop_if(scanned.result()):
            stopped.set()
            spark.sparkContext.cancelJobsWithTag(tag)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="custody-scan") as pool:
        pending = pool.submit(scan_batch, batch)
        pending.add_done_callback(stop_when_pointless)
        parsed = read_batch(spark, spec, batch)
        try:
            if not stopped.is_set():
                write_good(spark, parsed, stage, tag)
        except (Py4JError, PySparkException):
            if not stopped.is_set():
                raise
    return Written(parsed, pending.result(), complete=not stopped.is_set())


def write_good(
    spark: SparkSession, parsed: Parsed, stage: Staging, tag: str | None = None, mode: str = "errorifexists"
) -> None:
    """Write the rows that land to staging, under the description their scan's metrics are found by;
    parted rows one part at a time, each part's files apart (an empty part writes an empty file)."""
    where = stage.lake.uri(stage.data)
    with described(spark, main_query(stage), tag):
        if parsed.parts is None:
            parsed.good.write.mode(mode).parquet(where)
            return
        for number, part in enumerate(parsed.parts):
            parsed.good.where(part).write.mode(mode if number == 0 else "append").parquet(where)


def main_query(stage: Staging) -> str:
    return f"custody ingest {stage.path.name}"


@dataclass(frozen=True)
class Landed:
    """What a batch became in staging: the rows landed and quarantined, the rows read, and the
    DataFrame that wrote the landed rows."""

    data: Sealed
    quarantined: Sealed | None
    rows_read: int
    frame: DataFrame


def land(spark: SparkSession, spec: Spec, written: Written, stage: Staging) -> Landed:
    """Finish the good rows (written again, checking the text, if the scan stopped the first write),
    then settle the batch's counts."""
    batch, scan, parsed = written.scan.batch, written.scan, written.parsed
    if not written.complete:
        # Overwrite: the tasks of a cancelled write may still be removing their files.
        parsed = read_batch(spark, spec, batch, text=TextChecks.needed_by(scan))
        write_good(spark, parsed, stage, mode="overwrite")
    return settle(spark, spec, parsed, stage, f"batch {batch.batch_id!r}", lines=scan.lines)


def settle(
    spark: SparkSession, spec: Spec, parsed: Parsed, stage: Staging, what: str, *, lines: int | None = None
) -> Landed:
    """Seal the good rows written to staging; quarantine the rest; check that the counts add up.

    Three counts come from three places: rows landed from the Parquet footers, rows quarantined from
    the quarantine pass, and rows read from the source's own footers or `lines`, or else from a
    scan's metrics. The quarantine pass runs only when rows landed fall short of the rows read.
    """
    data = seal(stage.lake, stage.data, ".parquet")
    if parsed.checked and holds_nulls(data, parsed.nulls_unchecked):
        parsed = replace(parsed, good=parsed.checked(), nulls_unchecked=())
        write_good(spark, parsed, stage, mode="overwrite")
        data = seal(stage.lake, stage.data, ".parquet")
    known = _rows_known(spark, parsed, lines, stage)
    rows_read, quarantined = known.rows, None
    if data.rows != known.rows:
        side = f"custody quarantine {stage.path.name}"
        with described(spark, side):
            parsed.refused().write.mode("errorifexists").json(stage.lake.uri(stage.quarantine))
        quarantined = seal(stage.lake, stage.quarantine, ".json")
        if not known.exact:
            rows_read = rows_scanned(spark, side)
    if rows_read == 0:
        raise BatchError(f"{what} of {spec.key} holds no rows")
    refused = quarantined.rows if quarantined else 0
    if data.rows + refused != rows_read:
        raise IntegrityError(
            f"{what} of {spec.key}: counts do not add up: read {rows_read}, landed {data.rows}, quarantined {refused}"
        )
    if quarantined and refused:
        _enforce_bad_rows(spec, what, stage, rows_read, quarantined)
    return Landed(data, quarantined if refused else None, rows_read, parsed.good)


def ingestion_requested(catalog: Catalog, spec: Spec, request: RunRequest, details: dict[str, Any]) -> None:
    """Record the spec a landing runs under, and the request, with what it is about to read."""
    with catalog.session() as session:
        catalog.register_spec(session, spec, request.requested_by, request.run_id, request.assurance)
        ledger.append(
            session,
            actor=request.requested_by,
            action=ledger.Action.INGESTION_REQUESTED,
            asset=str(spec.key),
            run_id=request.run_id,
            assurance=request.assurance,
            details=details,
        )


def landing_draft(
    spec: Spec, request: RunRequest, attempt_id: str, landed: Landed, columns: VersionColumns | None, **more: Any
) -> Draft:
    """The version a landing attempt commits: what every landing records of it, and `more`: its
    batch and label, its database read, or its topic's offsets."""
    return Draft(
        key=spec.key,
        zone=Zone.LANDING,
        attempt_id=attempt_id,
        run_id=request.run_id,
        requested_by=request.requested_by,
        code_version=request.code_version,
        spec_hash=spec.hash,
        table_schema=landed.frame.schema.json(),
        data=landed.data,
        rows_read=landed.rows_read,
        quarantine=landed.quarantined,
        assurance=request.assurance,
        columns=columns,
        **more,
    )


def holds_nulls(sealed: Sealed, columns: tuple[str, ...]) -> bool:
    """Whether the sealed Parquet files hold a null in any of `columns`, as sealing them counted
    (a column it did not count may)."""
    return any(sealed.nulls.get(name, 1) > 0 for name in columns)


def _rows_known(spark: SparkSession, parsed: Parsed, lines: int | None, stage: Staging) -> RowCount:
    if parsed.known is not None:
        return parsed.known
    if parsed.headers is not None and lines is not None:
        return RowCount(lines - parsed.headers, exact=False)
    return RowCount(rows_scanned(spark, main_query(stage)), exact=True)


def _enforce_bad_rows(spec: Spec, what: str, stage: Staging, rows_read: int, quarantined: Sealed) -> None:
    bad = quarantined.rows
    fraction = bad / rows_read
    if spec.body.bad_rows == "fail":
        rule = "the spec says bad_rows: fail"
    elif fraction > spec.body.max_bad_fraction:
        rule = f"more than max_bad_fraction {spec.body.max_bad_fraction:g}"
    else:
        return
    first = "; ".join(f"{Path(r['file']).name}: {r['reason']}" for r in _first_refused(stage, quarantined, SAMPLE_SIZE))
    raise ValidationFailed(
        f"{what} of {spec.key}: {bad} of {rows_read} rows ({fraction:.1%}) break the spec, "
        f"{rule}; nothing was written. First: {first}"
    )


def _first_refused(stage: Staging, quarantined: Sealed, count: int) -> list[dict]:
    rows: list[dict] = []
    for entry in quarantined.files:
        wanted, text = count - len(rows), b""
        for block in stage.lake.blocks(stage.quarantine / entry.path):
            text += block
            if text.count(b"\n") >= wanted:
                break
        rows += [json.loads(line) for line in text.splitlines()[:wanted] if line.strip()]
        if len(rows) == count:
            break
    return rows
