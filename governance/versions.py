"""Immutable versions: seal what a run wrote in staging, then commit it as `v=N` in one step; read a
committed one back as a Spark DataFrame."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from governance import ledger
from governance.catalog import Catalog, utcnow
from governance.catalog.api import check_mark_unchanged, check_offsets_unchanged
from governance.catalog.hops import record_inputs
from governance.catalog.models import (
    BatchRow,
    RelationalRead,
    SourceFile,
    StreamRead,
    VersionRow,
    described_read,
    described_stream,
)
from governance.content import Footer, digest_parquet
from governance.errors import CommitUnknown, IntegrityError
from governance.lineage.versioned import VersionColumns
from governance.lineage.versioned import record as record_columns
from governance.runs import Progress, quiet
from governance.zones import AssetKey, Lake, Published, Staging, Zone

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class FileEntry:
    path: str
    bytes: int
    sha256: str
    rows: int | None = None


@dataclass(frozen=True)
class Sealed:
    """The files of a finished output folder, renamed to stable names and hashed. The rows of
    Parquet files are hashed too: that digest is the version's data_version (see
    `governance.content`); other files have none."""

    files: tuple[FileEntry, ...]
    data_version: str | None = None
    # Parquet's: how many rows are null in each top-level column, as the hashing counted them.
    nulls: Mapping[str, int] = field(default_factory=dict)
    # Parquet's: each file's footer, by name, as the hashing read it.
    footers: Mapping[str, Footer] = field(default_factory=dict, compare=False, repr=False)

    @property
    def rows(self) -> int:
        return sum(f.rows or 0 for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def seal(lake: Lake, folder: PurePath, suffix: str) -> Sealed:
    """Drop Spark's bookkeeping files, give part files stable names (where the lake can rename),
    and hash them."""
    parts = lake.seal(folder, suffix)
    if suffix == ".parquet":
        return _seal_parquet(lake, parts)
    return Sealed(tuple(_line_file(lake, part) for part in parts))


def _seal_parquet(lake: Lake, paths: list[PurePath]) -> Sealed:
    """Each file's bytes hashed as they are (the manifest's sha256, which `repair --verify` checks),
    and its rows decoded and hashed into the data_version."""
    content = digest_parquet(paths, lake.fs)
    entries = zip(paths, content.sizes, content.sha256, content.rows)
    return Sealed(
        tuple(FileEntry(path.name, size, sha256, rows) for path, size, sha256, rows in entries),
        content.digest,
        content.nulls,
        {path.name: footer for path, footer in zip(paths, content.footers)},
    )


def _line_file(lake: Lake, path: PurePath) -> FileEntry:
    digest, size, lines = hashlib.sha256(), 0, 0
    for block in lake.blocks(path):
        digest.update(block)
        size += len(block)
        lines += block.count(b"\n")
    return FileEntry(path.name, size, digest.hexdigest(), lines)


@dataclass(frozen=True)
class BatchRecord:
    """The DropZone batch behind a landing version."""

    batch_id: str
    fingerprint: str
    files: tuple[FileEntry, ...]
    requested_by: str | None = None
    label: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Draft:
    """Everything known about a version before it has a number."""

    key: AssetKey
    zone: Zone
    attempt_id: str
    run_id: str | None
    requested_by: str
    code_version: str
    spec_hash: str
    table_schema: str
    data: Sealed
    rows_read: int
    quarantine: Sealed | None = None
    label: str | None = None
    label_from: str | None = None
    assurance: str = "asserted"
    batch: BatchRecord | None = None
    # The database read a landing version comes from, recorded with it (its version id set then).
    read: RelationalRead | None = None
    # The topic's offsets a landing version holds, a row per partition (their version id set then).
    stream: tuple[StreamRead, ...] = ()
    # How the version's files part its rows, as its table is partitioned: Iceberg's transform of a
    # column, by name (`{"day": "kafka_timestamp"}`: each file holds the records of one UTC day).
    partitioned_by: dict[str, str] = field(default_factory=dict)
    inputs: Sequence[VersionRow] = ()
    details: dict[str, Any] = field(default_factory=dict)
    columns: VersionColumns | None = None

    @property
    def committed_action(self) -> str:
        if self.zone is Zone.LANDING:
            return ledger.Action.INGESTION_COMMITTED
        return ledger.Action.MATERIALIZATION_COMMITTED


def commit(catalog: Catalog, lake: Lake, stage: Staging, draft: Draft, progress: Progress = quiet) -> VersionRow:
    """Number, publish and record a version: all of it becomes visible, or none of it; then its
    table snapshot, if the lake has tables.

    The catalog's write lock is held from numbering to the end of the transaction; the lake
    publishes the attempt's folders inside it (a folder lake by rename, moved back if the
    transaction fails; an object store by nothing but the transaction). A crash before the commit
    leaves files the catalog does not know as a version, which `repair` removes.
    """
    published: Published | None = None
    number = 0
    try:
        with catalog.session() as session:
            number = catalog.next_number(session, draft.key)
            if draft.read:
                check_mark_unchanged(session, draft.key, draft.read)
            if draft.stream:
                check_offsets_unchanged(session, draft.key, draft.stream)
            created_at = utcnow()
            lake.write_manifest(stage.data, _manifest(draft, number, created_at, draft.data))
            if draft.quarantine:
                lake.write_manifest(stage.quarantine, _manifest(draft, number, created_at, draft.quarantine))
            published = lake.publish(stage, draft.zone, draft.key, number, quarantine=draft.quarantine is not None)
            row = _record(session, catalog, lake, draft, number, created_at, published.data, published.quarantine)
    except CommitUnknown as err:
        # Its files stay where the version would have them: repair removes them if it was not committed.
        ref = f"{draft.key}@{number}"
        raise CommitUnknown(
            f"{err} {ref}: whether it was committed is unknown until the catalog answers again; then "
            f"`custody repair` rolls the attempt back or records {ref} in Dagster, and says which"
        ) from err
    except BaseException:
        if published is not None:
            published.undo()
        raise
    if lake.tables is not None:
        lake.tables.after_commit(catalog, lake, row, progress, draft.data.footers)
    return row


def _record(
    session,
    catalog: Catalog,
    lake: Lake,
    draft: Draft,
    number: int,
    created_at,
    target: PurePath,
    q_target: PurePath | None,
) -> VersionRow:
    quarantined = draft.quarantine.rows if draft.quarantine else 0
    if draft.data.data_version is None:
        raise IntegrityError(f"{draft.key}: the version's files are not Parquet, so they have no data_version")
    row = VersionRow(
        asset_key=str(draft.key),
        number=number,
        label=draft.label,
        data_version=draft.data.data_version,
        zone=draft.zone.value,
        path=lake.stored(target),
        rows=draft.data.rows,
        rows_quarantined=quarantined,
        quarantine_path=lake.stored(q_target) if q_target else None,
        bytes=draft.data.bytes,
        table_schema=draft.table_schema,
        created_at=created_at,
        run_id=draft.run_id,
        code_version=draft.code_version,
        spec_hash=draft.spec_hash,
        requested_by=draft.requested_by,
        assurance=str(draft.assurance),
        attempt_id=draft.attempt_id,
        label_from=draft.label_from,
        column_lineage=json.dumps(draft.columns.summary) if draft.columns is not None else None,
    )
    session.add(row)
    session.flush()
    version_id = row.stored_id
    if draft.columns is not None:
        record_columns(session, version_id, draft.columns)
    record_inputs(session, version_id, [source.stored_id for source in draft.inputs], draft.run_id)
    if draft.batch:
        batch = BatchRow(
            asset_key=str(draft.key),
            batch_id=draft.batch.batch_id,
            fingerprint=draft.batch.fingerprint,
            version_id=version_id,
            requested_by=draft.batch.requested_by,
            label=draft.batch.label,
            note=draft.batch.note,
        )
        session.add(batch)
        session.flush()
        assert batch.id is not None  # the flush just above gave it one
        for f in draft.batch.files:
            session.add(SourceFile(batch_pk=batch.id, path=lake.stored(Path(f.path)), bytes=f.bytes, sha256=f.sha256))
    if draft.read:
        session.add(
            RelationalRead(
                **draft.read.model_dump(exclude={"id", "version_id", "asset_key"}),
                version_id=version_id,
                asset_key=str(draft.key),
            )
        )
    for read in draft.stream:
        fields = read.model_dump(exclude={"id", "version_id", "asset_key"})
        session.add(StreamRead(**fields, version_id=version_id, asset_key=str(draft.key)))
        if read.follows is not None and read.follows < read.start_offset:
            lost = {"topic": read.topic, "partition": read.partition, "from": read.follows, "to": read.start_offset}
            ledger.append(
                session,
                actor=draft.requested_by,
                action=ledger.Action.STREAM_GAP,
                asset=str(draft.key),
                version=number,
                run_id=draft.run_id,
                details={**lost, "offsets_lost": read.start_offset - read.follows},
            )
    catalog.finish_attempt(session, draft.attempt_id, "committed", version=number)
    details = {
        "data_version": row.data_version,
        "rows": row.rows,
        "rows_read": draft.rows_read,
        "rows_quarantined": quarantined,
        "bytes": row.bytes,
        "path": row.path,
        "label": row.label,
        "label_from": row.label_from,
        "assurance": row.assurance,
        "code_version": row.code_version,
        "inputs": [v.ref for v in draft.inputs],
        **draft.details,
    }
    if draft.batch:
        details["batch"] = draft.batch.batch_id
    if draft.read:
        details["source"] = described_read(draft.read)
    if draft.stream:
        details["stream"] = described_stream(draft.stream)
    if draft.columns is not None:
        details["column_lineage"] = draft.columns.summary
    ledger.append(
        session,
        actor=draft.requested_by,
        action=draft.committed_action,
        asset=str(draft.key),
        version=number,
        run_id=draft.run_id,
        details=details,
        assurance=draft.assurance,
    )
    if quarantined:
        ledger.append(
            session,
            actor=draft.requested_by,
            action=ledger.Action.ROWS_QUARANTINED,
            asset=str(draft.key),
            version=number,
            run_id=draft.run_id,
            assurance=draft.assurance,
            details={"rows": quarantined, "path": lake.uri(q_target) if q_target else None},
        )
    return row


def _manifest(draft: Draft, number: int, created_at, sealed: Sealed) -> dict[str, Any]:
    return {
        "asset": str(draft.key),
        "version": number,
        "attempt_id": draft.attempt_id,
        "run_id": draft.run_id,
        "created_at": created_at.isoformat(),
        "requested_by": draft.requested_by,
        "label": draft.label,
        "label_from": draft.label_from,
        "code_version": draft.code_version,
        "spec_hash": draft.spec_hash,
        "data_version": draft.data.data_version,
        "rows": sealed.rows,
        "bytes": sealed.bytes,
        "schema": json.loads(draft.table_schema),
        "files": [asdict(f) for f in sealed.files],
        **({"partitioned_by": draft.partitioned_by} if draft.partitioned_by and sealed is draft.data else {}),
        "inputs": [{"asset": v.asset_key, "version": v.number, "data_version": v.data_version} for v in draft.inputs],
    }


def file_problem(lake: Lake, folder: PurePath, entry: dict[str, Any], *, hashed: bool = True) -> str | None:
    """What is wrong with one file a manifest lists: missing, another size, or (`hashed`) other bytes."""
    path = folder / entry["path"]
    size = lake.size(path)
    if size is None:
        return f"missing {lake.uri(path)}"
    if "bytes" in entry and size != entry["bytes"]:
        return f"{lake.uri(path)} is not the size its manifest says"
    if hashed and lake.sha256(path) != entry["sha256"]:
        return f"{lake.uri(path)} does not match its sha256"
    return None


def read_dataframe(spark: SparkSession, lake: Lake, row: VersionRow) -> DataFrame:
    """The version as a Spark DataFrame over its immutable files, given the schema they were written
    with. Spark would find the same schema in a file's footer, read by a job of its own: tens of
    milliseconds on a local lake, more from an object store. Either way it reads every column
    back as nullable."""
    frame = version_frame(spark, lake, row)
    # Given a schema, Spark reads a folder whose files are gone as no rows, where finding the
    # schema would have failed; it has listed the files already.
    if row.rows and not frame.inputFiles():
        raise files_gone(row)
    return frame


def version_frame(spark: SparkSession, lake: Lake, row: VersionRow) -> DataFrame:
    """The version as `read_dataframe` reads it, without asking Spark for the files it found: that
    plans the read, milliseconds per input. The caller checks them otherwise (`require_files`)."""
    from pyspark.sql.types import StructType

    folder = lake.at(row.path)
    return spark.read.schema(StructType.fromJson(json.loads(row.table_schema))).parquet(lake.uri(folder))


def require_files(lake: Lake, rows: Iterable[VersionRow]) -> None:
    """Refuse the first of `rows` that holds rows but whose folder in the lake holds no data file."""
    if (gone := missing_files(lake, rows)) is not None:
        raise gone


def missing_files(lake: Lake, rows: Iterable[VersionRow]) -> IntegrityError | None:
    """The refusal of the first of `rows` that holds rows but whose folder holds no data file, if one does."""
    for row in rows:
        if row.rows and not lake.has_files(lake.at(row.path)):
            return files_gone(row)
    return None


def files_gone(row: VersionRow) -> IntegrityError:
    """The refusal of a version whose files are gone from the lake, naming the command that tells which."""
    return IntegrityError(
        f"{row.ref} holds {row.rows} rows, but {row.path} in the lake has none of its files; "
        "custody repair --verify names what is missing"
    )
