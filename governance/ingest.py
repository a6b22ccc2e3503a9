"""Governed ingestion of one DropZone batch with PySpark: read, validate, quarantine, write, commit."""

from __future__ import annotations

import csv
import json
import operator
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path

import pyarrow.parquet as pq
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from governance import ledger
from governance.batches import Batch, BatchScan, first_line, open_batch, ready_batches, scan_batch
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.errors import BatchError, DuplicateBatch, IntegrityError, NotFound, ValidationFailed
from governance.lineage.openlineage import Dataset, Emitter, JobRun, column_inputs, dataset_of
from governance.lineage.versioned import DEFAULT_COLUMNS, ColumnOptions, landing_columns, warn_about
from governance.quarantine import explain_csv_record
from governance.repair import repair
from governance.runs import Progress, RunRequest, attempt, quiet
from governance.sparkmetrics import described, rows_scanned
from governance.sparktypes import arrow_type_name, normalized, spark_schema, spark_type
from governance.spec import Column, Spec
from governance.versions import Draft, Sealed, commit, seal
from governance.zones import Lake, Staging, Zone

CORRUPT = "_corrupt_record"
SAMPLE_SIZE = 3


@dataclass(frozen=True)
class RowCount:
    """Rows read from a batch: exact (Parquet footers, a scan's count) or at most (lines of text)."""

    rows: int
    exact: bool


@dataclass(frozen=True)
class Parsed:
    """A batch as Spark reads it: the rows that land, and a way to find the rows refused and why.

    `refused` is a function because it may build a Python UDF or a second reader, and only batches
    that hold refused rows pay for that. Rows read are `known` (Parquet footers), or at most the
    batch's lines less `headers` (CSV), or else counted by the good rows' scan (JSON).

    `good` may leave the nulls of `nulls_unchecked` in: the written files' statistics tell whether
    there are any, which costs nothing, and only then are the rows written again from `checked`.
    """

    good: DataFrame
    refused: Callable[[], DataFrame]
    known: RowCount | None = None
    headers: int | None = None
    nulls_unchecked: tuple[str, ...] = ()
    checked: Callable[[], DataFrame] | None = None


def _refused_rows(frame: DataFrame, reason: SparkColumn, raw: SparkColumn, detail: SparkColumn | None = None) -> DataFrame:
    """Refused rows as the quarantine keeps them. `record` reads every column, which also keeps
    Spark's CSV column pruning from skipping the parse that flags a malformed row."""
    return frame.filter(reason.isNotNull()).select(
        F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", "").alias("file"),
        (reason if detail is None else detail).alias("reason"),
        raw.alias("record"),
    )


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
    column comes from unless `column_lineage` is None."""
    events = events or Emitter.off()
    repair(catalog, lake)
    batch_id = next_batch(catalog, lake, spec) if batch_id is None else batch_id
    progress(f"checking batch {batch_id} of {spec.key}")
    batch = open_batch(lake, spec.key, batch_id, spec.body.source.format)
    _refuse_known_batch(catalog, spec, batch, force)
    if spec.body.source.format == "csv" and spec.body.source.header:
        check_csv_headers(spec, batch)
    with catalog.session() as session:
        catalog.register_spec(session, spec, request.requested_by, request.run_id, request.assurance)
        ledger.append(
            session, actor=request.requested_by, action=ledger.Action.INGESTION_REQUESTED, asset=str(spec.key),
            run_id=request.run_id, assurance=request.assurance,
            details={"batch": batch.batch_id, "files": len(batch.files), "bytes": batch.bytes,
                     "batch_requested_by": batch.meta.requested_by, "label": batch.meta.label, "forced": force},
        )
    seen = frozenset() if force else catalog.batch_fingerprints(spec.key)
    dropped = Dataset(str(batch.path), batch.batch_id, roles=spec.body.roles.model_dump())
    job = JobRun(str(spec.key), "INGESTION", request, [dropped])
    with events.running(job, progress) as outputs, attempt(catalog, lake, spec.key, request, ledger.Action.INGESTION_FAILED) as (attempt_id, stage):
        progress(f"reading {len(batch.files)} file(s), {batch.bytes / 1e6:.1f} MB, writing Parquet")
        written = write_while_scanning(spark, spec, batch, stage, stop_if=lambda scan: scan.fingerprint in seen)
        _refuse_same_files(catalog, spec, written.scan, force)
        landed = land(spark, spec, written, stage)
        columns = landing_columns(landed.frame, column_lineage, [f.path for f in batch.files]) if column_lineage else None
        warn_about(columns, progress)
        quarantined = landed.quarantined.rows if landed.quarantined else 0
        progress(f"committing {landed.data.rows} rows ({quarantined} quarantined)")
        draft = Draft(
            key=spec.key, zone=Zone.LANDING, attempt_id=attempt_id, run_id=request.run_id,
            requested_by=request.requested_by, code_version=request.code_version, spec_hash=spec.hash,
            table_schema=landed.frame.schema.json(), data=landed.data, rows_read=landed.rows_read,
            quarantine=landed.quarantined, label=batch.meta.label, assurance=request.assurance,
            batch=written.scan.record(), columns=columns,
        )
        row = commit(catalog, lake, stage, draft)
        outputs.add(dataset_of(lake, row, spec.body.roles.model_dump(), column_inputs(columns, {None: dropped})))
    return row


def next_batch(catalog: Catalog, lake: Lake, spec: Spec) -> str:
    done = catalog.ingested_batch_ids(spec.key)
    pending = [b for b in ready_batches(lake, spec.key) if b not in done]
    if not pending:
        raise NotFound(f"no ready batch to ingest for {spec.key} in {lake.drop_dir(spec.key)}")
    return pending[0]


def _refuse_known_batch(catalog: Catalog, spec: Spec, batch: Batch, force: bool) -> None:
    seen = None if force else catalog.batch_by_id(spec.key, batch.batch_id)
    if seen:
        raise DuplicateBatch(f"batch {batch.batch_id!r} was already ingested as {seen[1].ref}; use --force to ingest it again")


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
        header = next(csv.reader([first_line(f.path)], delimiter=spec.body.source.delimiter), [])
        header = [h.strip() for h in header]
        if header != declared:
            raise BatchError(f"{f.path}: header does not match the spec of {spec.key}: {column_difference(declared, header)}")


def column_difference(expected: list[str], found: list[str]) -> str:
    """Name what is missing, unexpected or out of order, in that order of importance."""
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unexpected {', '.join(extra)}"] if extra else [])
    return "; ".join(parts) or f"columns out of order: found {', '.join(found)}; expected {', '.join(expected)}"


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

    The plan assumes valid UTF-8. A scan that finds other bytes, cannot read a file, or that
    `stop_if` refuses (files already ingested) cancels the write as soon as it is known.
    """
    tag = f"custody-{stage.path.name}"
    stopped = threading.Event()

    def stop_when_pointless(scanned: Future[BatchScan]) -> None:
        failed = scanned.exception() is not None
        if failed or not scanned.result().valid_utf8 or stop_if(scanned.result()):
            stopped.set()
            spark.sparkContext.cancelJobsWithTag(tag)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="custody-scan") as pool:
        pending = pool.submit(scan_batch, batch)
        pending.add_done_callback(stop_when_pointless)
        parsed = read_batch(spark, spec, batch, utf8_checks=False)
        try:
            if not stopped.is_set():
                _write_good(spark, parsed, stage, tag)
        except (Py4JError, PySparkException):
            if not stopped.is_set():
                raise
    return Written(parsed, pending.result(), complete=not stopped.is_set())


def _write_good(spark: SparkSession, parsed: Parsed, stage: Staging, tag: str | None = None, mode: str = "errorifexists") -> None:
    with described(spark, _main_query(stage), tag):
        parsed.good.write.mode(mode).parquet(str(stage.data))


def _main_query(stage: Staging) -> str:
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
    """Finish the good rows (written again, checking the text, if the scan stopped the first write);
    quarantine the rest; check that the counts add up.

    Three counts come from three places: rows landed from the Parquet footers, rows quarantined from
    the quarantine pass, and rows read from the batch's own footers or lines, or else from a scan's
    metrics. The quarantine pass runs only when rows landed fall short of the rows the batch may hold.
    """
    batch, scan, parsed = written.scan.batch, written.scan, written.parsed
    if not written.complete:
        # Overwrite: the tasks of a cancelled write may still be removing their files.
        parsed = read_batch(spark, spec, batch, utf8_checks=not scan.valid_utf8)
        _write_good(spark, parsed, stage, mode="overwrite")
    data = seal(stage.data, ".parquet")
    if parsed.checked and holds_nulls(stage.data, data, parsed.nulls_unchecked):
        parsed = replace(parsed, good=parsed.checked(), nulls_unchecked=())
        _write_good(spark, parsed, stage, mode="overwrite")
        data = seal(stage.data, ".parquet")
    known = _rows_known(spark, parsed, scan, stage)
    rows_read, quarantined = known.rows, None
    if data.rows != known.rows:
        side = f"custody quarantine {stage.path.name}"
        with described(spark, side):
            parsed.refused().write.mode("errorifexists").json(str(stage.quarantine))
        quarantined = seal(stage.quarantine, ".json")
        if not known.exact:
            rows_read = rows_scanned(spark, side)
    if rows_read == 0:
        raise BatchError(f"batch {batch.batch_id!r} of {spec.key} holds no rows")
    refused = quarantined.rows if quarantined else 0
    if data.rows + refused != rows_read:
        raise IntegrityError(
            f"batch {batch.batch_id!r} of {spec.key}: counts do not add up: read {rows_read}, "
            f"landed {data.rows}, quarantined {refused}"
        )
    if refused:
        _enforce_bad_rows(spec, batch, stage, rows_read, refused)
    return Landed(data, quarantined if refused else None, rows_read, parsed.good)


def holds_nulls(folder: Path, sealed: Sealed, columns: tuple[str, ...]) -> bool:
    """Whether the Parquet files may hold a null in any of `columns`, from their statistics; a
    column chunk without a null count may."""
    if not columns:
        return False
    for entry in sealed.files:
        footer = pq.read_metadata(folder / entry.path)
        names = footer.schema.names
        for group in range(footer.num_row_groups):
            for name in columns:
                stats = footer.row_group(group).column(names.index(name)).statistics
                if stats is None or not stats.has_null_count or stats.null_count > 0:
                    return True
    return False


def _rows_known(spark: SparkSession, parsed: Parsed, scan: BatchScan, stage: Staging) -> RowCount:
    if parsed.known is not None:
        return parsed.known
    if parsed.headers is not None and scan.lines is not None:
        return RowCount(scan.lines - parsed.headers, exact=False)
    return RowCount(rows_scanned(spark, _main_query(stage)), exact=True)


def _enforce_bad_rows(spec: Spec, batch: Batch, stage: Staging, rows_read: int, bad: int) -> None:
    fraction = bad / rows_read
    if spec.body.bad_rows == "fail":
        rule = "the spec says bad_rows: fail"
    elif fraction > spec.body.max_bad_fraction:
        rule = f"more than max_bad_fraction {spec.body.max_bad_fraction:g}"
    else:
        return
    shown = "; ".join(f"{Path(r['file']).name}: {r['reason']}" for r in _first_refused(stage, SAMPLE_SIZE))
    raise ValidationFailed(
        f"batch {batch.batch_id!r} of {spec.key}: {bad} of {rows_read} rows ({fraction:.1%}) break the spec, "
        f"{rule}; nothing was written. First: {shown}"
    )


def _first_refused(stage: Staging, count: int) -> list[dict]:
    rows: list[dict] = []
    for part in sorted(stage.quarantine.glob("part-*.json")):
        with open(part, encoding="utf-8") as handle:
            rows += [json.loads(line) for line, _ in zip(handle, range(count - len(rows)))]
        if len(rows) == count:
            break
    return rows


def read_batch(spark: SparkSession, spec: Spec, batch: Batch, *, utf8_checks: bool) -> Parsed:
    """The batch as Spark reads it; with `utf8_checks`, rows holding bytes that were not UTF-8 are refused."""
    readers = {"csv": _read_csv, "json": _read_json, "parquet": _read_parquet}
    return readers[spec.body.source.format](spark, spec, batch, utf8_checks)


def _paths(batch: Batch) -> list[str]:
    return [str(f.path) for f in batch.files]


def _read_csv(spark: SparkSession, spec: Spec, batch: Batch, utf8_checks: bool) -> Parsed:
    """Good rows come from a reader that drops malformed rows itself, as cheap as a bare read; only
    when fewer rows land than the batch has lines does a second reader keep them, to say why."""
    source, columns = spec.body.source, spec.body.columns
    reader = (
        spark.read.option("header", source.header)
        .option("sep", source.delimiter)
        .option("multiLine", source.multiline)
        .option("encoding", "UTF-8")
    )
    checks = _value_checks(columns, F.col, utf8_checks)
    frame = reader.schema(spark_schema(columns)).option("mode", "DROPMALFORMED").csv(_paths(batch))

    def checked() -> DataFrame:
        return frame.filter(_passes(checks)) if checks else frame

    def refused() -> DataFrame:
        frame = (
            reader.schema(spark_schema(columns).add(CORRUPT, T.StringType(), True))
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .csv(_paths(batch))
        )
        explain = F.udf(lambda raw: explain_csv_record(raw, columns, source.delimiter), T.StringType())
        malformed = F.col(CORRUPT).isNotNull()
        reason = _first_reason([(malformed, F.lit("malformed row")), *checks])
        raw = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*[F.col(c.name) for c in columns])))
        return _refused_rows(frame, reason, raw, F.when(malformed, explain(F.col(CORRUPT))).otherwise(reason))

    headers = len(batch.files) if source.header else 0
    if utf8_checks:
        return Parsed(checked(), refused, headers=headers)
    required = tuple(c.name for c in columns if not c.nullable)
    return Parsed(frame, refused, headers=headers, nulls_unchecked=required, checked=checked)


def _read_json(spark: SparkSession, spec: Spec, batch: Batch, utf8_checks: bool) -> Parsed:
    source = spec.body.source
    frame = (
        spark.read.option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("multiLine", source.multiline)
        .option("encoding", "UTF-8")
        .json(_paths(batch))
    )
    leaves = _flatten(frame.schema)
    if not leaves:
        raise BatchError(f"batch {batch.batch_id!r} of {spec.key}: no line of {', '.join(f.path.name for f in batch.files)} is a JSON object")
    found = {name: column for name, column in leaves}
    corrupt = F.col(CORRUPT) if CORRUPT in frame.columns else F.lit(None).cast("string")
    checks: list[tuple[SparkColumn, SparkColumn]] = [(corrupt.isNotNull(), F.lit("not a JSON object"))]
    if spec.body.columns:
        _match_columns(spec, batch, list(found))
        typed = {c.name: found[c.name].try_cast(spark_type(c.type)) for c in spec.body.columns}
        checks += [
            (found[c.name].isNotNull() & typed[c.name].isNull(), F.lit(f"column {c.name} is not a valid {c.type}"))
            for c in spec.body.columns
        ]
        checks += _value_checks(spec.body.columns, typed.__getitem__, utf8_checks)
        outputs = [typed[c.name].alias(c.name) for c in spec.body.columns]
    else:
        outputs = [column.alias(name) for name, column in leaves]
    reason = _first_reason(checks)
    raw = F.coalesce(corrupt, F.to_json(F.struct(*[column.alias(name) for name, column in leaves])))
    # Rows read are this scan's own count: its filter must not be pushed into the reader, which
    # would skip rows before they are counted. A CASE on the corrupt-record column is not pushed.
    good = frame.filter(reason.isNull()).select(*outputs)
    return Parsed(good, lambda: _refused_rows(frame, reason, raw))


def _flatten(schema: T.StructType, prefix: Sequence[str] = ()) -> list[tuple[str, SparkColumn]]:
    """Leaf columns of nested structs, named `parent__child`."""
    leaves = []
    for field in schema.fields:
        if not prefix and field.name == CORRUPT:
            continue
        path = [*prefix, field.name]
        if isinstance(field.dataType, T.StructType):
            leaves += _flatten(field.dataType, path)
        else:
            column = F.col(f"`{path[0]}`")
            for part in path[1:]:
                column = column.getField(part)
            leaves.append(("__".join(path), column))
    return leaves


def _match_columns(spec: Spec, batch: Batch, found: list[str]) -> None:
    declared = [c.name for c in spec.body.columns]
    if set(declared) != set(found):
        raise BatchError(f"batch {batch.batch_id!r} of {spec.key}: columns do not match the spec: {column_difference(declared, found)}")


def _read_parquet(spark: SparkSession, spec: Spec, batch: Batch, utf8_checks: bool) -> Parsed:
    """Rows read come from the footers: a scan's count would miss row groups its filters skip."""
    expected = [(c.name, normalized(c.type)) for c in spec.body.columns]
    rows = 0
    for f in batch.files:
        footer = pq.read_metadata(f.path)
        actual = [(field.name, arrow_type_name(field.type)) for field in footer.schema.to_arrow_schema()]
        if not expected:
            expected = actual
        elif actual != expected:
            raise BatchError(f"{f.path}: Parquet schema does not match the spec of {spec.key}: {_schema_difference(expected, actual)}")
        rows += footer.num_rows
    frame = spark.read.parquet(*_paths(batch))
    outputs = [F.col(f"`{name}`") for name, _ in expected]
    checks = _value_checks(spec.body.columns, lambda name: F.col(f"`{name}`"), utf8_checks)
    reason = _first_reason(checks)
    return Parsed(
        frame.filter(_passes(checks)).select(*outputs),
        lambda: _refused_rows(frame, reason, F.to_json(F.struct(*outputs))),
        RowCount(rows, exact=True),
    )


def _schema_difference(expected: list[tuple[str, str]], actual: list[tuple[str, str]]) -> str:
    wanted, got = dict(expected), dict(actual)
    types = [f"{n} is {got[n]}, expected {t}" for n, t in wanted.items() if n in got and got[n] != t]
    if list(wanted) == list(got) and types:
        return "; ".join(types)
    return column_difference(list(wanted), list(got))


def _value_checks(
    columns: list[Column], value: Callable[[str], SparkColumn], utf8_checks: bool
) -> list[tuple[SparkColumn, SparkColumn]]:
    """Checks of declared nullability and, where the bytes were not valid UTF-8, of the text.

    Columns are built only for the checks due: each costs a call into the JVM."""
    checks = [
        (value(c.name).isNull(), F.lit(f"column {c.name} is null but declared not nullable"))
        for c in columns if not c.nullable
    ]
    if utf8_checks:
        # Spark decodes invalid bytes to U+FFFD without a word; only batches that hold such bytes
        # (found while hashing) pay for looking for it.
        checks += [
            (F.coalesce(value(c.name).contains("\ufffd"), F.lit(False)), F.lit(f"column {c.name} is not valid UTF-8"))
            for c in columns if c.type == "string"
        ]
    return checks


def _passes(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    """Rows that fail no check (conditions are never null), as a conjunction Spark can push into
    the reader: the same split as `_first_reason`, cheaper on the main scan. Pushed filters skip
    rows before the scan counts them, so only readers that count rows read elsewhere use it."""
    return reduce(operator.and_, (~condition for condition, _ in checks), F.lit(True))


def _first_reason(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    if not checks:
        return F.lit(None).cast("string")
    reason = F.when(*checks[0])
    for condition, value in checks[1:]:
        reason = reason.when(condition, value)
    return reason
