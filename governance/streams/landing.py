"""Landing a topic, exactly once: the records from where the asset's last version ended up to the
topic's end when the landing starts, read by Spark's Kafka source as one batch between explicit
offsets (as the landing account), parsed as a batch's records are, and committed as the next
version with its offset ranges in the same catalog transaction. A range another run committed
meanwhile fails the commit, so no record lands twice; each version starts where the one before
ended, so none is skipped, unless Kafka deleted it first: then the offsets lost are a recorded gap.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from governance import ledger
from governance.catalog import Catalog
from governance.catalog.api import offsets_landed
from governance.catalog.models import StreamRead, StreamTopicRow, VersionRow
from governance.errors import CustodyError, IntegrityError, InvalidInput
from governance.ingest import ingestion_requested, landing_draft, settle, write_good
from governance.lineage.openlineage import Dataset, Emitter, JobRun, column_inputs, dataset_of
from governance.lineage.versioned import (
    DEFAULT_COLUMNS,
    ColumnOptions,
    VersionColumns,
    fetched_columns,
    warn_about,
)
from governance.quarantine import CONTROL, MAX_JSON_DEPTH
from governance.readers import CORRUPT, Parsed, RowCount, TextChecks, json_parsed
from governance.repair import repair
from governance.runs import Progress, RunRequest, attempt, quiet, record_failure
from governance.spark.json import inferred_schema
from governance.spec import Spec, StreamSource
from governance.streams.broker import KafkaAdmin
from governance.streams.records import KAFKA_COLUMNS, KEPT_FROM, TIMESTAMP
from governance.streams.settings import KafkaSettings
from governance.streams.topics import compacted
from governance.versions import commit
from governance.zones import Lake, Staging

MICROS_A_DAY = 86_400_000_000
# What the columns of a record's place begin with while it is parsed.
HIDDEN = "\x00kafka "
VALUE = "value"
# Where in its staging folder a landing keeps the records it read.
FETCHED = "fetched"
# How the records' JSON is read, for the schema's inference and for the parse: a record that is not
# JSON in its own column, as a batch's line is.
JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT, "maxNestingDepth": str(MAX_JSON_DEPTH)}


@dataclass(frozen=True)
class Range:
    """One partition's offsets a landing reads: from `start` up to `end` (exclusive). `follows` is
    where the asset's last version ended in it (None: no version read it yet); offsets between it
    and `start` were deleted by Kafka before they were landed."""

    partition: int
    start: int
    end: int
    follows: int | None

    @property
    def lost(self) -> int:
        return self.start - self.follows if self.follows is not None else 0


def plan(catalog: Catalog, admin: KafkaAdmin, spec: Spec) -> list[Range]:
    """Each partition's range, from the end of the asset's last version (or the topic's beginning)
    to the topic's end now."""
    topic = spec.topic
    assert topic is not None  # only streamed specs come here
    state = admin.topic(topic)
    if state is None:
        raise InvalidInput(f"{spec.key}: topic {topic} does not exist on {admin.where}: apply the spec to create it")
    if state.compacted:
        raise InvalidInput(f"{spec.key}: {compacted(state, admin)}")
    with catalog.reading() as session:
        landed = offsets_landed(session, spec.key, topic)
        governed = session.get(StreamTopicRow, topic)
    # A topic Custody created is the asset's from its first offset: what Kafka deleted of it before
    # any landing is a gap too.
    beginning = 0 if governed is not None and governed.created else None
    ranges = []
    for partition, (low, high) in sorted(admin.watermarks(topic, state.partitions).items()):
        follows = landed.get(partition, beginning)
        if follows is not None and follows > high:
            raise IntegrityError(
                f"{spec.key}: partition {partition} of {topic} ends at offset {high}, before offset {follows} "
                "its versions reached: the topic was deleted and made again; land it under another asset"
            )
        ranges.append(Range(partition, low if follows is None else max(follows, low), high, follows))
    return ranges


def land_topic(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    request: RunRequest,
    *,
    progress: Progress = quiet,
    events: Emitter | None = None,
    column_lineage: ColumnOptions | None = DEFAULT_COLUMNS,
    settings: KafkaSettings | None = None,
) -> VersionRow:
    """Land the records of the spec's topic since its last version as its next version."""
    source, topic = spec.stream_source, spec.topic
    assert source is not None and topic is not None  # only streamed specs come here
    events = events or Emitter.off()
    repair(catalog, lake)
    ingestion_requested(catalog, spec, request, {"topic": topic})
    try:
        admin = KafkaAdmin(settings or KafkaSettings.from_env())
        ranges = plan(catalog, admin, spec)
        if not any(r.end > r.start for r in ranges):
            raise InvalidInput(f"{spec.key}: no record of topic {topic} since its last version: nothing to land")
    except CustodyError as err:
        record_failure(catalog, spec.key, request, ledger.Action.INGESTION_FAILED, err, {"topic": topic})
        raise
    for lost in (r for r in ranges if r.lost):
        progress(
            f"warning: offsets {lost.follows}-{lost.start - 1} of partition {lost.partition} of {topic} were "
            "deleted by Kafka before they were landed: recorded as a gap"
        )
    return _land(spark, catalog, lake, spec, source, request, admin.settings, ranges, progress, events, column_lineage)


def _land(
    spark: SparkSession,
    catalog: Catalog,
    lake: Lake,
    spec: Spec,
    source: StreamSource,
    request: RunRequest,
    settings: KafkaSettings,
    ranges: list[Range],
    progress: Progress,
    events: Emitter,
    column_lineage: ColumnOptions | None,
) -> VersionRow:
    topic = spec.topic
    assert topic is not None
    span = ", ".join(f"{r.partition}:{r.start}-{r.end}" for r in ranges if r.end > r.start)
    dataset = Dataset(topic, span, namespace=f"kafka://{settings.bootstrap.split(',')[0]}")
    job = JobRun(str(spec.key), "INGESTION", request, [dataset])
    details = {"topic": topic, "offsets": span}
    with (
        events.running(job, progress) as outputs,
        attempt(catalog, lake, spec.key, request, ledger.Action.INGESTION_FAILED, details) as (attempt_id, stage),
    ):
        progress(f"reading {topic} (partition:offsets {span}) as {settings.lander}")
        fetched = _fetch(spark, settings, topic, ranges, stage)
        counted = _counted(fetched)
        parsed = _parsed(spec, source, fetched, topic)
        # No day (a range of transaction markers alone): one write, of no row, which `settle` refuses.
        days = _day_parts(counted.days) or None
        parsed = replace(parsed, known=RowCount(counted.records, exact=True), parts=days)
        write_good(spark, parsed, stage)
        landed = settle(spark, spec, parsed, stage, f"offsets {span} of topic {topic}")
        fetched_at = stage.lake.uri(stage.path / FETCHED)
        columns = _by_field(fetched_columns(landed.frame, column_lineage, fetched_at)) if column_lineage else None
        warn_about(columns, progress)
        quarantined = landed.quarantined.rows if landed.quarantined else 0
        progress(f"committing {landed.data.rows} records ({quarantined} quarantined)")
        draft = landing_draft(
            spec,
            request,
            attempt_id,
            landed,
            columns,
            stream=tuple(_read(topic, r, counted.partitions.get(r.partition)) for r in ranges),
            partitioned_by={"day": TIMESTAMP},
        )
        row = commit(catalog, lake, stage, draft, progress)
        outputs.add(dataset_of(lake, row, spec.body.roles.model_dump(), column_inputs(columns, {None: dataset})))
    return row


def _by_field(columns: VersionColumns) -> VersionColumns:
    """A column parsed from the records' JSON depends on its field (`a.b` for `a__b`), as a batch's
    does, rather than on each record's whole value, where Spark's plan sees it read from."""
    deps = (
        replace(dep, input_column=dep.column.replace("__", "."))
        if dep.column is not None and dep.column not in KAFKA_COLUMNS and dep.input_column == VALUE
        else dep
        for dep in columns.deps
    )
    return replace(columns, deps=tuple(dict.fromkeys(deps)))


def _fetch(spark: SparkSession, settings: KafkaSettings, topic: str, ranges: list[Range], stage: Staging) -> DataFrame:
    """The ranges' records, copied once into staging as Parquet: every later pass (the schema's
    inference, the landing, the quarantine) reads the copy, never Kafka again. A range Kafka no
    longer holds whole fails the read (failOnDataLoss), so nothing lands of it."""
    reading = [r for r in ranges if r.end > r.start]
    starts = {topic: {str(r.partition): r.start for r in reading}}
    ends = {topic: {str(r.partition): r.end for r in reading}}
    records = (
        spark.read.format("kafka")
        .options(**settings.spark_options(settings.lander, settings.lander_password))
        .option("assign", json.dumps({topic: [r.partition for r in reading]}))
        .option("startingOffsets", json.dumps(starts))
        .option("endingOffsets", json.dumps(ends))
        .option("failOnDataLoss", "true")
        # Records of aborted transactions are never read, as no consumer of the topic reads them.
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    folder = stage.lake.uri(stage.path / FETCHED)
    records.select("partition", "offset", "timestamp", "key", "value").write.parquet(folder)
    # Read back in a session of its own that tells apart names that differ only in case, so that
    # records whose fields clash so are refused one by one (see `json_parsed`).
    apart = spark.newSession()
    apart.conf.set("spark.sql.caseSensitive", "true")
    return apart.read.parquet(folder)


@dataclass(frozen=True)
class Counted:
    """Each partition's records read with their first and last times, and the days they fall on."""

    partitions: dict[int, tuple[int, datetime, datetime]]
    days: tuple[date, ...]

    @property
    def records(self) -> int:
        return sum(records for records, _, _ in self.partitions.values())


def _counted(fetched: DataFrame) -> Counted:
    """The records read, counted by partition and UTC day (in microseconds since the epoch: a
    collected timestamp would come in the host's own time zone, a date in Spark's session's)."""
    times = F.unix_micros(F.col("timestamp"))
    day = F.floor(times / MICROS_A_DAY).alias("day")
    rows = fetched.groupBy("partition", day).agg(F.count("*"), F.min(times), F.max(times)).collect()
    partitions: dict[int, tuple[int, datetime, datetime]] = {}
    for partition, _, records, first, last in rows:
        before = partitions.get(partition, (0, _utc(first), _utc(last)))
        partitions[partition] = (before[0] + records, min(before[1], _utc(first)), max(before[2], _utc(last)))
    days = sorted({_utc(row["day"] * MICROS_A_DAY).date() for row in rows})
    return Counted(partitions, tuple(days))


def _day_parts(days: tuple[date, ...]) -> tuple[Column, ...]:
    """A condition per day that the landed records' times fall in: the version's files each hold
    one day, as its table is partitioned (a comparison with the column itself, which the Parquet
    reader of the fetched copy uses to skip the other days)."""
    at = F.col(TIMESTAMP)
    starts = [datetime.combine(day, time(), UTC) for day in days]
    return tuple((at >= F.lit(start)) & (at < F.lit(start + timedelta(days=1))) for start in starts)


def _utc(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, UTC)


def _read(topic: str, r: Range, counted: tuple[int, datetime, datetime] | None) -> StreamRead:
    records, first, last = counted or (0, None, None)
    # SQLModel's types ask for every field, though a table model checks none when built: the version
    # id and asset key are set when the version is recorded (`governance.versions`).
    return StreamRead(  # type: ignore[call-arg]
        topic=topic,
        partition=r.partition,
        start_offset=r.start,
        end_offset=r.end,
        follows=r.follows,
        records=records,
        first_record_at=first,
        last_record_at=last,
    )


def _origin(topic: str, partition: Column | None = None, offset: Column | None = None) -> Column:
    """Where a refused record was: `<topic> partition P offset O`."""
    at = (F.col("partition"), F.col("offset")) if partition is None or offset is None else (partition, offset)
    return F.concat(F.lit(f"{topic} partition "), at[0], F.lit(" offset "), at[1])


def _parsed(spec: Spec, source: StreamSource, fetched: DataFrame, topic: str) -> Parsed:
    """The records as a batch's would be parsed: JSON objects flattened, with the schema Spark
    infers from them, their fields typed and checked as the spec's columns say when it declares
    them; text as one `value` column. A record without a value (a key alone), empty, or whose bytes
    are not UTF-8 (kept in base64) is refused; every refusal names its partition and offset."""
    text = F.col("value").cast("string")
    unreadable = (
        F.when(F.col("value").isNull(), F.lit("the record has no value, only a key"))
        .when(F.encode(text, "UTF-8") != F.col("value"), F.lit("the value is not UTF-8 text"))
        .when(F.trim(text) == "", F.lit("the value is empty"))
    )
    readable = fetched.filter(unreadable.isNull())
    refused_first = fetched.filter(unreadable.isNotNull()).select(
        _origin(topic).alias("file"),
        unreadable.alias("reason"),
        F.coalesce(F.base64("value"), F.lit("")).alias("record"),
    )
    if source.records == "text":
        control = F.regexp_extract(text, CONTROL, 0)
        held = F.concat(F.lit("the value holds control character U+"), F.lpad(F.hex(F.ascii(control)), 4, "0"))
        refused_text = readable.filter(control != "").select(
            _origin(topic).alias("file"), held.alias("reason"), text.alias("record")
        )
        readable = readable.filter(control == "")
        good = readable.select(text.alias(VALUE), *(F.col(kafka).alias(name) for name, kafka, _ in KEPT_FROM))
        return Parsed(good, lambda: refused_first.unionByName(refused_text))
    schema = _inferred(readable, spec)
    # The record's place under names no field of a record can have (a control character refuses it).
    place = {f"{HIDDEN}{name}": F.col(name) for name in ("partition", "offset", "timestamp")}
    place[f"{HIDDEN}{VALUE}"] = text  # what a refused record's quarantine keeps, as it came
    frame = readable.select(
        *(column.alias(name) for name, column in place.items()), F.from_json(text, schema, JSON_OPTIONS).alias("record")
    ).select(*place, "record.*")
    where = f"offsets of topic {topic} for {spec.key}"
    kept = [(name, F.col(f"`{HIDDEN}{kafka}`")) for name, kafka, _ in KEPT_FROM]
    origin = _origin(topic, F.col(f"`{HIDDEN}partition`"), F.col(f"`{HIDDEN}offset`"))
    parsed = json_parsed(
        spec,
        frame,
        where,
        TextChecks(controls=True),
        origin=origin,
        kept=kept,
        hidden=frozenset(place),
        by_record=True,
        record=F.col(f"`{HIDDEN}{VALUE}`"),
    )
    refused_parsing = parsed.refused
    return replace(parsed, refused=lambda: refused_parsing().unionByName(refused_first))


def _inferred(readable: DataFrame, spec: Spec) -> StructType:
    """The schema Spark infers from the records' values, with a column for the corrupt ones."""
    schema = inferred_schema(readable.select(F.col("value").cast("string")), JSON_OPTIONS)
    if not [field for field in schema.fields if field.name != CORRUPT]:
        raise InvalidInput(f"{spec.key}: no record of the range read is a JSON object: nothing to land")
    return schema if CORRUPT in schema.fieldNames() else schema.add(CORRUPT, "string")
