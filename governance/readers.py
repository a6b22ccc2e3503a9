"""How Spark reads a DropZone batch: the rows that land, and the refused ones with the reason for each."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import reduce

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from governance.batches import Batch, BatchScan, DropFile, first_line, opened
from governance.errors import BatchError, shown
from governance.feeds.names import FETCHED_AT
from governance.jsonshapes import representatives
from governance.quarantine import CONTROL, MAX_JSON_DEPTH, explain_csv_record, explain_json_record
from governance.spark.types import arrow_type_name, normalized, spark_schema, spark_type
from governance.spec import Column, Spec

CORRUPT = "_corrupt_record"
GLOB_CHARACTERS = frozenset("[]*?{}\\")
MAX_NAMES_SHOWN = 10
# From this many multiline JSON files on, Spark infers the schema from one file of each shape.
SHAPES_FROM_FILES = 32


@dataclass(frozen=True)
class RowCount:
    """Rows read from a batch: exact (Parquet footers, a scan's count) or at most (lines of text)."""

    rows: int
    exact: bool


@dataclass(frozen=True)
class TextChecks:
    """Checks of the text only some batches need, as the pass that hashed them found: bytes that
    are not UTF-8 (Spark decodes them to U+FFFD without a word), and control characters."""

    utf8: bool = False
    controls: bool = False

    @classmethod
    def needed_by(cls, scan: BatchScan) -> TextChecks:
        return cls(utf8=not scan.valid_utf8, controls=bool(scan.controls))

    @property
    def any(self) -> bool:
        return self.utf8 or self.controls


@dataclass(frozen=True)
class Parsed:
    """A batch as Spark reads it: the rows that land, and a way to find the rows refused and why.

    `refused` is a function because it may build a Python UDF or a second reader, and only batches
    that hold refused rows pay for that. Rows read are `known` (Parquet footers), or at most the
    batch's lines less `headers` (CSV), or else counted by the good rows' scan (JSON).

    `good` may leave the nulls of `nulls_unchecked` in: sealing the written files counts the nulls
    of each column, which costs nothing more, and only if there are any are the rows written again
    from `checked`.
    """

    good: DataFrame
    refused: Callable[[], DataFrame]
    known: RowCount | None = None
    headers: int | None = None
    nulls_unchecked: tuple[str, ...] = ()
    checked: Callable[[], DataFrame] | None = None
    # What reading the batch took upon itself, for the version's ledger entry.
    notes: tuple[str, ...] = ()
    # Conditions that part the good rows between files, each file holding the rows of one: the
    # partitions of the version's table (the days of a stream's records). None: one write.
    parts: tuple[SparkColumn, ...] | None = None


def read_batch(spark: SparkSession, spec: Spec, batch: Batch, *, text: TextChecks = TextChecks()) -> Parsed:
    """The batch as Spark reads it, with the text checks `text` asks for."""
    readers = {"csv": _read_csv, "json": _read_json, "parquet": _read_parquet, "raw": _read_raw}
    return readers[spec.file_source.format](spark, spec, batch, text)


def literal_paths(batch: Batch) -> list[str]:
    """The batch's files as Spark must be given them: Spark expands glob characters in a path, so a
    file named `a[1].csv` would otherwise read `a1.csv`, or fail."""
    return [_literal(f) for f in batch.files]


def _literal(file: DropFile) -> str:
    return "".join(f"\\{ch}" if ch in GLOB_CHARACTERS else ch for ch in str(file.path))


def column_difference(expected: list[str], found: list[str]) -> str:
    """Name what is missing, unexpected or out of order, in that order of importance. Found names
    come from a file: shown escaped and cut short, and at most ten of them."""
    missing = [c for c in expected if c not in found]
    extra = [c for c in found if c not in expected]
    parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unexpected {_names(extra)}"] if extra else [])
    return "; ".join(parts) or f"columns out of order: found {_names(found)}; expected {', '.join(expected)}"


def _names(names: list[str]) -> str:
    listed = ", ".join(shown(name, 32) for name in names[:MAX_NAMES_SHOWN])
    more = len(names) - MAX_NAMES_SHOWN
    return listed + (f" and {more} more" if more > 0 else "")


def _refused_rows(
    frame: DataFrame,
    reason: SparkColumn,
    raw: SparkColumn,
    detail: SparkColumn | None = None,
    *,
    origin: SparkColumn | None = None,
) -> DataFrame:
    """Refused rows as the quarantine keeps them: where each came from (its file, by default),
    why, and the record. `record` reads every column, which also keeps Spark's CSV column pruning
    from skipping the parse that flags a malformed row."""
    return frame.filter(reason.isNotNull()).select(
        (file_origin() if origin is None else origin).alias("file"),
        (reason if detail is None else detail).alias("reason"),
        raw.alias("record"),
    )


def file_origin() -> SparkColumn:
    """The file a row was read from. Spark gives it as a URI: its path is decoded ('+' is a plain
    character in a URI's path)."""
    path = F.regexp_replace(F.col("_metadata.file_path"), "^file:(//)?", "")
    return F.url_decode(F.regexp_replace(path, "\\+", "%2B"))


def _read_csv(spark: SparkSession, spec: Spec, batch: Batch, text: TextChecks) -> Parsed:
    """Good rows come from a reader that drops malformed rows itself, as cheap as a bare read; only
    when fewer rows land than the batch has lines does a second reader keep them, to say why."""
    source, columns = spec.file_source, spec.body.columns
    reader = (
        spark.read.option("header", source.header)
        .option("sep", source.delimiter)
        .option("multiLine", source.multiline)
        .option("encoding", "UTF-8")
    )
    checks = value_checks(columns, F.col, text)
    frame = reader.schema(spark_schema(columns)).option("mode", "DROPMALFORMED").csv(literal_paths(batch))

    def checked() -> DataFrame:
        return frame.filter(_passes(checks)) if checks else frame

    def refused() -> DataFrame:
        frame = (
            reader.schema(spark_schema(columns).add(CORRUPT, T.StringType(), True))
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .csv(literal_paths(batch))
        )
        explain = F.udf(lambda raw: explain_csv_record(raw, columns, source.delimiter), T.StringType())
        malformed = F.col(CORRUPT).isNotNull()
        reason = first_reason([(malformed, F.lit("malformed row")), *checks])
        raw = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*[F.col(c.name) for c in columns])))
        return _refused_rows(frame, reason, raw, F.when(malformed, explain(F.col(CORRUPT))).otherwise(reason))

    headers = len(batch.files) if source.header else 0
    if text.any:
        return Parsed(checked(), refused, headers=headers)
    required = tuple(c.name for c in columns if not c.nullable)
    return Parsed(frame, refused, headers=headers, nulls_unchecked=required, checked=checked)


def _read_json(spark: SparkSession, spec: Spec, batch: Batch, text: TextChecks) -> Parsed:
    """A line that is not a JSON object, holds a control character or nests deeper than
    MAX_JSON_DEPTH levels (deeper ones would overflow the JVM's stack) is a corrupt record: refused,
    with the reason a parse in Python finds."""
    frame = _json_frame(spark, spec, batch)
    if not _flatten(frame.schema):
        files = ", ".join(f.path.name for f in batch.files)
        raise BatchError(
            f"batch {batch.batch_id!r} of {spec.key}: no line of {files} is a JSON object: "
            f"{_why_not_json(batch.files[0])}"
        )
    return json_parsed(spec, frame, f"batch {batch.batch_id!r} of {spec.key}", text, origin=file_origin())


def json_parsed(
    spec: Spec,
    frame: DataFrame,
    where: str,
    text: TextChecks,
    *,
    origin: SparkColumn,
    kept: Sequence[tuple[str, SparkColumn]] = (),
    hidden: frozenset[str] = frozenset(),
    by_record: bool = False,
    record: SparkColumn | None = None,
) -> Parsed:
    """JSON records Spark parsed into `frame` (corrupt ones in CORRUPT), flattened and checked as the
    spec says. `origin` says where a refused record comes from; `kept` are columns that land after
    the record's own, from the `hidden` top-level columns, which are not the record's.

    A field that cannot land (two that would be one column, a control character in its name, one
    the spec does not declare) refuses the whole read, or `by_record`, each record that holds it:
    a topic cannot take a record back as a producer takes back a file, so one odd record must not
    hold back those after it; a field that would land in one of the `kept` columns is such a field.
    Spark tells apart names that differ only in case if `frame`'s session does
    (`spark.sql.caseSensitive`). A refused row's quarantine keeps `record` (the record as it came),
    or else its fields as JSON."""
    strays: list[tuple[SparkColumn, SparkColumn]] = []
    if by_record:
        leaves, strays = _kept_apart(spec, frame, hidden, frozenset(name for name, _ in kept))
    else:
        leaves = _flatten(frame.schema, hidden=hidden)
        _refuse_bad_fields(where, leaves)
    found = {name: leaf.column for name, leaf in leaves.items()}
    corrupt = F.col(CORRUPT) if CORRUPT in frame.columns else F.lit(None).cast("string")
    checks: list[tuple[SparkColumn, SparkColumn]] = [(corrupt.isNotNull(), F.lit("not a JSON object")), *strays]
    if spec.body.columns:
        if not by_record:
            _match_columns(spec, where, list(found))
        # A declared field no record of a topic's range holds is null in each.
        given = {c.name: found.get(c.name, F.lit(None)) for c in spec.body.columns}
        typed = {c.name: given[c.name].try_cast(spark_type(c.type)) for c in spec.body.columns}
        checks += [
            (given[c.name].isNotNull() & typed[c.name].isNull(), F.lit(f"column {c.name} is not a valid {c.type}"))
            for c in spec.body.columns
        ]
        checks += value_checks(spec.body.columns, typed.__getitem__, text)
        outputs = [typed[c.name].alias(c.name) for c in spec.body.columns]
    else:
        strings = [name for name, leaf in leaves.items() if isinstance(leaf.type, T.StringType)]
        checks += _text_checks(strings, found.__getitem__, text)
        outputs = [column.alias(name) for name, column in found.items()]
    reason = first_reason(checks)
    rebuilt = F.to_json(F.struct(*[column.alias(name) for name, column in found.items()]))
    raw = record if record is not None else F.coalesce(corrupt, rebuilt)
    explain = F.udf(lambda raw: explain_json_record(raw), T.StringType())
    # Rows read are this scan's own count: its filter must not be pushed into the reader, which
    # would skip rows before they are counted. A CASE on the corrupt-record column is not pushed.
    good = frame.filter(reason.isNull()).select(*outputs, *(column.alias(name) for name, column in kept))
    detail = F.when(corrupt.isNotNull(), explain(corrupt)).otherwise(reason)
    return Parsed(good, lambda: _refused_rows(frame, reason, raw, detail, origin=origin))


def _json_frame(spark: SparkSession, spec: Spec, batch: Batch) -> DataFrame:
    """The batch's JSON, with the schema Spark infers from it: from one file of each shape when
    the batch holds many multiline files (see `governance.jsonshapes`), which infers the same."""
    reader = (
        spark.read.option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("multiLine", spec.file_source.multiline)
        .option("encoding", "UTF-8")
        .option("maxNestingDepth", MAX_JSON_DEPTH)
    )
    try:
        if spec.file_source.multiline and len(batch.files) >= SHAPES_FROM_FILES:
            sample = representatives(batch.files)
            schema = reader.json([_literal(f) for f in sample]).schema
            return reader.schema(schema).json(literal_paths(batch))
        return reader.json(literal_paths(batch))
    except AnalysisException as err:
        if err.getCondition() != "COLUMN_ALREADY_EXISTS":
            raise
        name = (err.getMessageParameters() or {}).get("columnName", "?").strip("`")
        files = ", ".join(f.path.name for f in batch.files)
        raise BatchError(
            f"{files}: two fields are named {shown(name, 64)} but for case, which Spark cannot tell "
            "apart; rename one of them"
        ) from err


def _why_not_json(file: DropFile) -> str:
    """Why the first line of a file is not a JSON object."""
    line, whole = first_line(file)
    return explain_json_record(line, whole=whole)


@dataclass(frozen=True)
class _Leaf:
    """A leaf column of nested JSON, with the fields that flatten to its name (`a.b` for a nested field)."""

    column: SparkColumn
    type: T.DataType
    fields: tuple[str, ...]


def _flatten(schema: T.StructType, hidden: frozenset[str] = frozenset()) -> dict[str, _Leaf]:
    """Leaf columns of nested structs, named `parent__child`; a name two fields flatten to keeps
    every field that claims it. The top level's CORRUPT and `hidden` columns are not leaves."""
    leaves: dict[str, _Leaf] = {}
    for name, leaf in _fields(schema, hidden=hidden):
        known = leaves.get(name)
        leaves[name] = leaf if known is None else _Leaf(known.column, known.type, known.fields + leaf.fields)
    return leaves


def _fields(
    schema: T.StructType, prefix: Sequence[str] = (), hidden: frozenset[str] = frozenset()
) -> Iterator[tuple[str, _Leaf]]:
    """Each leaf field of nested structs, with the column name it flattens to."""
    for field in schema.fields:
        if not prefix and (field.name == CORRUPT or field.name in hidden):
            continue
        path = [*prefix, field.name]
        if isinstance(field.dataType, T.StructType):
            yield from _fields(field.dataType, path)
            continue
        column = F.col(_quoted(path[0]))
        for part in path[1:]:
            column = column.getField(part)
        yield "__".join(path), _Leaf(column, field.dataType, (".".join(path),))


def _kept_apart(
    spec: Spec, frame: DataFrame, hidden: frozenset[str], reserved: frozenset[str]
) -> tuple[dict[str, _Leaf], list[tuple[SparkColumn, SparkColumn]]]:
    """The fields that land, by column name, and a refusal of each record holding one that cannot.
    Of fields that would land as one column, the spec's declared one lands, or else the one most
    records hold (counted only when fields clash); none lands in a `reserved` column's name."""
    declared = {c.name for c in spec.body.columns}
    fields = list(_fields(frame.schema, hidden=hidden))
    taken = {name.lower(): name for name in reserved}
    strays: list[tuple[SparkColumn, SparkColumn]] = []
    clashing: dict[str, list[int]] = {}
    for number, (name, leaf) in enumerate(fields):
        if name.lower() in taken:
            reason = f"field {shown(leaf.fields[0], 64)} would land in column {taken[name.lower()]}, which Custody adds"
            strays.append((leaf.column.isNotNull(), F.lit(reason)))
        else:
            clashing.setdefault(name.lower(), []).append(number)
    contested = [number for numbers in clashing.values() if len(numbers) > 1 for number in numbers]
    held = _records_holding(frame, [fields[n][1].column for n in contested]) if contested and not declared else []
    counts = dict(zip(contested, held))
    leaves: dict[str, _Leaf] = {}
    for numbers in clashing.values():
        lands = [n for n in numbers if fields[n][0].isprintable() and (not declared or fields[n][0] in declared)]
        winner = max(lands, key=lambda n: (counts.get(n, 0), -n), default=None)
        for number in numbers:
            name, leaf = fields[number]
            if number == winner:
                leaves[name] = leaf
            else:
                reason = _why_apart(name, leaf, fields[winner][1] if winner is not None else None, declared)
                strays.append((leaf.column.isNotNull(), F.lit(reason)))
    return leaves, strays


def _records_holding(frame: DataFrame, columns: list[SparkColumn]) -> list[int]:
    """How many records hold a value in each of `columns`, in one pass."""
    return list(frame.select(*(F.count(column) for column in columns)).first() or [])


def _why_apart(name: str, leaf: _Leaf, winner: _Leaf | None, declared: set[str]) -> str:
    field = shown(leaf.fields[0], 64)
    if declared and name not in declared:
        return f"field {field} is not a column the spec declares"
    if not name.isprintable():
        return f"field {field} holds a control character"
    assert winner is not None  # a printable field that is not the winner lost to another
    return f"field {field} would land in one column with field {shown(winner.fields[0], 64)} of other records"


def _quoted(name: str) -> str:
    """A column name as Spark's column syntax takes it, whatever it holds."""
    return "`" + name.replace("`", "``") + "`"


def _refuse_bad_fields(where: str, leaves: dict[str, _Leaf]) -> None:
    """Two fields may not land as one column: one would be lost. Spark matches column names
    ignoring case, so names that differ only in case collide too. A name may hold no control
    character, which would reach every screen that shows the column."""
    for name, leaf in leaves.items():
        if len(leaf.fields) > 1:
            both = " and ".join(shown(field, 64) for field in sorted(leaf.fields))
            raise BatchError(f"{where}: fields {both} would both land as column {shown(name, 64)}; rename one of them")
        if not name.isprintable():
            raise BatchError(f"{where}: field {shown(name, 64)} holds a control character; rename it")
    by_case: dict[str, list[str]] = {}
    for name in leaves:
        by_case.setdefault(name.lower(), []).append(name)
    for names in by_case.values():
        if len(names) > 1:
            both = " and ".join(shown(name, 64) for name in sorted(names))
            raise BatchError(
                f"{where}: fields {both} differ only in case, which Spark cannot tell apart; rename one of them"
            )


def _match_columns(spec: Spec, where: str, found: list[str]) -> None:
    declared = [c.name for c in spec.body.columns]
    if set(declared) != set(found):
        raise BatchError(f"{where}: columns do not match the spec: {column_difference(declared, found)}")


def _read_parquet(spark: SparkSession, spec: Spec, batch: Batch, text: TextChecks) -> Parsed:
    """Rows read come from the footers: a scan's count would miss row groups its filters skip."""
    expected = [(c.name, normalized(c.type)) for c in spec.body.columns]
    rows, naive = 0, set()
    for f in batch.files:
        footer = _footer(f)
        fields = footer.schema.to_arrow_schema()
        actual = [(field.name, arrow_type_name(field.type)) for field in fields]
        if not expected:
            expected = actual
        elif actual != expected:
            raise BatchError(
                f"{f.path}: Parquet schema does not match the spec of {spec.key}: {_schema_difference(expected, actual)}"
            )
        naive |= {field.name for field in fields if pa.types.is_timestamp(field.type) and field.type.tz is None}
        rows += footer.num_rows
    frame = spark.read.parquet(*literal_paths(batch))
    # A time without a zone is taken as UTC, the zone every version's times are in: a version's
    # columns keep one type, and its table snapshot Iceberg's `timestamptz`.
    outputs = [
        F.col(_quoted(name)).cast("timestamp").alias(name) if name in naive else F.col(_quoted(name))
        for name, _ in expected
    ]
    checks = value_checks(spec.body.columns, lambda name: F.col(_quoted(name)), text)
    reason = first_reason(checks)
    note = f"{', '.join(sorted(naive))}: times without a time zone, taken as UTC"
    return Parsed(
        frame.filter(_passes(checks)).select(*outputs),
        lambda: _refused_rows(frame, reason, F.to_json(F.struct(*outputs))),
        RowCount(rows, exact=True),
        notes=(note,) if naive else (),
    )


def _read_raw(spark: SparkSession, spec: Spec, batch: Batch, text: TextChecks) -> Parsed:
    """Each file a row, kept whole: its name, when it was fetched (read from the name a feed's
    download has), its size, SHA-256 and bytes. Nothing in a file can be refused."""
    frame = spark.read.format("binaryFile").load(literal_paths(batch))
    name = F.element_at(F.split(F.col("path"), "/"), -1)
    fetched = F.to_timestamp(F.regexp_extract(name, FETCHED_AT, 1), "yyyyMMdd'T'HHmmss.SSS")
    good = frame.select(
        name.alias("file"),
        fetched.alias("fetched_at"),
        F.col("length").alias("bytes"),
        F.sha2(F.col("content"), 256).alias("sha256"),
        F.col("content"),
    )
    return Parsed(
        good,
        lambda: good.limit(0).select(
            F.col("file"),
            F.lit(None).cast("string").alias("reason"),
            F.lit(None).cast("string").alias("record"),
        ),
        RowCount(len(batch.files), exact=True),
    )


def _footer(file: DropFile) -> pq.FileMetaData:
    with opened(file) as handle:
        try:
            return pq.read_metadata(handle)
        except (OSError, pa.ArrowException) as err:
            raise BatchError(
                f"{file.path}: cannot be read as Parquet: its footer is damaged ({shown(str(err).strip(), 120)})"
            ) from err


def _schema_difference(expected: list[tuple[str, str]], actual: list[tuple[str, str]]) -> str:
    wanted, got = dict(expected), dict(actual)
    types = [f"{n} is {got[n]}, expected {t}" for n, t in wanted.items() if n in got and got[n] != t]
    if list(wanted) == list(got) and types:
        return "; ".join(types)
    return column_difference(list(wanted), list(got))


def value_checks(
    columns: list[Column], value: Callable[[str], SparkColumn], text: TextChecks
) -> list[tuple[SparkColumn, SparkColumn]]:
    """Checks of declared nullability and, where the scan found the need, of the text.

    Columns are built only for the checks due: each costs a call into the JVM."""
    checks = [
        (value(c.name).isNull(), F.lit(f"column {c.name} is null but declared not nullable"))
        for c in columns
        if not c.nullable
    ]
    return checks + _text_checks([c.name for c in columns if c.type == "string"], value, text)


def _text_checks(
    strings: list[str], value: Callable[[str], SparkColumn], text: TextChecks
) -> list[tuple[SparkColumn, SparkColumn]]:
    """Checks of the string columns' text: bytes that were not UTF-8, and control characters."""
    checks = []
    if text.utf8:
        checks += [
            (F.coalesce(value(name).contains("\ufffd"), F.lit(False)), F.lit(f"column {name} is not valid UTF-8"))
            for name in strings
        ]
    if text.controls:
        checks += [
            (
                F.coalesce(value(name).rlike(CONTROL), F.lit(False)),
                F.concat(
                    F.lit(f"column {name} holds control character U+"),
                    F.lpad(F.hex(F.ascii(F.regexp_extract(value(name), CONTROL, 0))), 4, "0"),
                ),
            )
            for name in strings
        ]
    return checks


def _passes(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    """Rows that fail no check (conditions are never null), as a conjunction Spark can push into
    the reader: the same split as `first_reason`, cheaper on the main scan. Pushed filters skip
    rows before the scan counts them, so only readers that count rows read elsewhere use it."""
    return reduce(operator.and_, (~condition for condition, _ in checks), F.lit(True))


def first_reason(checks: list[tuple[SparkColumn, SparkColumn]]) -> SparkColumn:
    if not checks:
        return F.lit(None).cast("string")
    reason = F.when(*checks[0])
    for condition, value in checks[1:]:
        reason = reason.when(condition, value)
    return reason
