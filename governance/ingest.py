"""Governed ingestion of one DropZone batch with PySpark: read, validate, quarantine, write, commit."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from governance import ledger
from governance.batches import Batch, first_line, open_batch, ready_batches
from governance.catalog import Catalog
from governance.catalog.models import VersionRow
from governance.errors import BatchError, DuplicateBatch, IntegrityError, NotFound, ValidationFailed
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
class Parsed:
    """A batch as Spark reads it: the output columns, and why each row is refused (null if it is not).

    `reason` is cheap and decides the split in the main scan; `detail` may run Python and is only
    evaluated on rows already refused.
    """

    frame: DataFrame
    outputs: list[SparkColumn]
    reason: SparkColumn
    raw: SparkColumn
    detail: SparkColumn | None = None

    def refused(self) -> DataFrame:
        """Refused rows as the quarantine keeps them. `record` reads every column, which also keeps
        Spark's CSV column pruning from skipping the parse that flags a malformed row."""
        return self.frame.filter(self.reason.isNotNull()).select(
            F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", "").alias("file"),
            (self.reason if self.detail is None else self.detail).alias("reason"),
            self.raw.alias("record"),
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
) -> VersionRow:
    """Land one ready batch of a landing asset as its next version."""
    repair(catalog, lake)
    batch_id = next_batch(catalog, lake, spec) if batch_id is None else batch_id
    progress(f"checking batch {batch_id} of {spec.key}")
    batch = open_batch(lake, spec.key, batch_id, spec.body.source.format)
    _refuse_duplicate(catalog, spec, batch, force)
    if spec.body.source.format == "csv" and spec.body.source.header:
        check_csv_headers(spec, batch)
    catalog.register_spec(spec, request.requested_by, request.run_id)
    with catalog.session() as session:
        ledger.append(
            session, actor=request.requested_by, action=ledger.Action.INGESTION_REQUESTED, asset=str(spec.key),
            run_id=request.run_id,
            details={"batch": batch.batch_id, "files": len(batch.files), "bytes": batch.bytes,
                     "batch_requested_by": batch.meta.requested_by, "label": batch.meta.label, "forced": force},
        )
    with attempt(catalog, lake, spec.key, request, ledger.Action.INGESTION_FAILED) as (attempt_id, stage):
        progress(f"reading {len(batch.files)} file(s), {batch.bytes / 1e6:.1f} MB, writing Parquet")
        data, quarantined, rows_read, schema = land(spark, spec, batch, stage)
        progress(f"committing {data.rows} rows ({quarantined.rows if quarantined else 0} quarantined)")
        draft = Draft(
            key=spec.key, zone=Zone.LANDING, attempt_id=attempt_id, run_id=request.run_id,
            requested_by=request.requested_by, code_version=request.code_version, spec_hash=spec.hash,
            table_schema=schema, data=data, rows_read=rows_read, quarantine=quarantined,
            label=batch.meta.label, batch=batch.record(),
        )
        return commit(catalog, lake, stage, draft)


def next_batch(catalog: Catalog, lake: Lake, spec: Spec) -> str:
    done = catalog.ingested_batch_ids(spec.key)
    pending = [b for b in ready_batches(lake, spec.key) if b not in done]
    if not pending:
        raise NotFound(f"no ready batch to ingest for {spec.key} in {lake.drop_dir(spec.key)}")
    return pending[0]


def _refuse_duplicate(catalog: Catalog, spec: Spec, batch: Batch, force: bool) -> None:
    if force:
        return
    seen = catalog.batch_by_id(spec.key, batch.batch_id)
    if seen:
        raise DuplicateBatch(f"batch {batch.batch_id!r} was already ingested as {seen[1].ref}; use --force to ingest it again")
    same = catalog.batch_by_fingerprint(spec.key, batch.fingerprint)
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


def land(spark: SparkSession, spec: Spec, batch: Batch, stage: Staging) -> tuple[Sealed, Sealed | None, int, str]:
    """Write good rows to staging in one scan; quarantine the rest; check that the counts add up.

    Three counts come from three places: rows read from the scan's own metrics, rows landed from
    the Parquet footers, rows quarantined from the quarantine pass, which runs only if some are due.
    """
    parsed = read_batch(spark, spec, batch)
    good = parsed.frame.filter(parsed.reason.isNull()).select(*parsed.outputs)
    description = f"custody ingest {stage.path.name}"
    with described(spark, description):
        good.write.mode("errorifexists").parquet(str(stage.data))
    rows_read = rows_scanned(spark, description)
    data = seal(stage.data, ".parquet")
    if rows_read == 0:
        raise BatchError(f"batch {batch.batch_id!r} of {spec.key} holds no rows")
    bad = rows_read - data.rows
    quarantined = None
    if bad > 0:
        _enforce_bad_rows(spec, batch, parsed, rows_read, bad)
        quarantined = _write_quarantine(parsed, stage)
    if bad < 0 or (quarantined.rows if quarantined else 0) != bad:
        raise IntegrityError(
            f"batch {batch.batch_id!r} of {spec.key}: counts do not add up: read {rows_read}, "
            f"landed {data.rows}, quarantined {quarantined.rows if quarantined else 0}"
        )
    return data, quarantined, rows_read, good.schema.json()


def _enforce_bad_rows(spec: Spec, batch: Batch, parsed: Parsed, rows_read: int, bad: int) -> None:
    fraction = bad / rows_read
    if spec.body.bad_rows == "fail":
        rule = "the spec says bad_rows: fail"
    elif fraction > spec.body.max_bad_fraction:
        rule = f"more than max_bad_fraction {spec.body.max_bad_fraction:g}"
    else:
        return
    samples = parsed.refused().limit(SAMPLE_SIZE).collect()
    shown = "; ".join(f"{Path(r['file']).name}: {r['reason']}" for r in samples)
    raise ValidationFailed(
        f"batch {batch.batch_id!r} of {spec.key}: {bad} of {rows_read} rows ({fraction:.1%}) break the spec, "
        f"{rule}; nothing was written. First: {shown}"
    )


def _write_quarantine(parsed: Parsed, stage: Staging) -> Sealed:
    parsed.refused().write.mode("errorifexists").json(str(stage.quarantine))
    return seal(stage.quarantine, ".json")


def read_batch(spark: SparkSession, spec: Spec, batch: Batch) -> Parsed:
    readers = {"csv": _read_csv, "json": _read_json, "parquet": _read_parquet}
    return readers[spec.body.source.format](spark, spec, batch)


def _paths(batch: Batch) -> list[str]:
    return [str(f.path) for f in batch.files]


def _read_csv(spark: SparkSession, spec: Spec, batch: Batch) -> Parsed:
    source = spec.body.source
    schema = spark_schema(spec.body.columns).add(CORRUPT, T.StringType(), True)
    frame = (
        spark.read.schema(schema)
        .option("header", source.header)
        .option("sep", source.delimiter)
        .option("multiLine", source.multiline)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("encoding", "UTF-8")
        .csv(_paths(batch))
    )
    columns = spec.body.columns
    explain = F.udf(lambda raw: explain_csv_record(raw, columns, source.delimiter), T.StringType())
    malformed = F.col(CORRUPT).isNotNull()
    checks = [(malformed, F.lit("malformed row"))] + _value_checks(columns, {c.name: F.col(c.name) for c in columns}, batch)
    outputs = [F.col(c.name) for c in columns]
    raw = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*outputs)))
    reason = _first_reason(checks)
    detail = F.when(malformed, explain(F.col(CORRUPT))).otherwise(reason)
    return Parsed(frame, outputs, reason, raw, detail)


def _read_json(spark: SparkSession, spec: Spec, batch: Batch) -> Parsed:
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
        checks += _value_checks(spec.body.columns, typed, batch)
        outputs = [typed[c.name].alias(c.name) for c in spec.body.columns]
    else:
        outputs = [column.alias(name) for name, column in leaves]
    raw = F.coalesce(corrupt, F.to_json(F.struct(*[column.alias(name) for name, column in leaves])))
    return Parsed(frame, outputs, _first_reason(checks), raw)


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


def _read_parquet(spark: SparkSession, spec: Spec, batch: Batch) -> Parsed:
    expected = [(c.name, normalized(c.type)) for c in spec.body.columns]
    for f in batch.files:
        actual = [(field.name, arrow_type_name(field.type)) for field in pq.read_schema(f.path)]
        if not expected:
            expected = actual
        elif actual != expected:
            raise BatchError(f"{f.path}: Parquet schema does not match the spec of {spec.key}: {_schema_difference(expected, actual)}")
    frame = spark.read.parquet(*_paths(batch))
    names = [name for name, _ in expected]
    outputs = [F.col(f"`{name}`") for name in names]
    checks = _value_checks(spec.body.columns, {c.name: F.col(f"`{c.name}`") for c in spec.body.columns}, batch)
    return Parsed(frame, outputs, _first_reason(checks), F.to_json(F.struct(*outputs)))


def _schema_difference(expected: list[tuple[str, str]], actual: list[tuple[str, str]]) -> str:
    wanted, got = dict(expected), dict(actual)
    types = [f"{n} is {got[n]}, expected {t}" for n, t in wanted.items() if n in got and got[n] != t]
    if list(wanted) == list(got) and types:
        return "; ".join(types)
    return column_difference(list(wanted), list(got))


def _value_checks(columns: list[Column], values: dict[str, SparkColumn], batch: Batch) -> list[tuple[SparkColumn, SparkColumn]]:
    checks = [
        (values[c.name].isNull(), F.lit(f"column {c.name} is null but declared not nullable"))
        for c in columns if not c.nullable
    ]
    if not batch.valid_utf8:
        # Spark decodes invalid bytes to U+FFFD without a word; only batches that hold such bytes
        # (found while hashing) pay for looking for it.
        checks += [
            (values[c.name].contains("\ufffd"), F.lit(f"column {c.name} is not valid UTF-8"))
            for c in columns if c.type == "string"
        ]
    return checks


def _first_reason(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    if not checks:
        return F.lit(None).cast("string")
    reason = F.when(*checks[0])
    for condition, value in checks[1:]:
        reason = reason.when(condition, value)
    return reason
