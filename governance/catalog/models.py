"""Catalog tables. Portable SQLModel: the same schema runs on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Column, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from governance.catalog.states import VersionStatus
from governance.errors import NotFound


class AssetRow(SQLModel, table=True):
    __tablename__ = "asset"

    key: str = Field(primary_key=True)
    domain: str
    name: str
    zone: str
    spec_hash: str
    spec_json: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: datetime


class SpecSnapshot(SQLModel, table=True):
    __tablename__ = "spec_snapshot"
    __table_args__ = (UniqueConstraint("asset_key", "spec_hash"),)

    id: int | None = Field(default=None, primary_key=True)
    asset_key: str = Field(index=True)
    spec_hash: str
    spec_json: str = Field(sa_column=Column(Text, nullable=False))
    recorded_at: datetime


class SpecApplication(SQLModel, table=True):
    """An owner putting a spec in force: the definition runs use until the next one. `asset.spec_hash`
    is the newest; this keeps each one, with who applied it and what it changed."""

    __tablename__ = "spec_application"

    id: int | None = Field(default=None, primary_key=True)
    asset_key: str = Field(index=True)
    spec_hash: str | None = None  # None: the asset was retired
    previous_hash: str | None = None
    applied_by: str
    assurance: str
    applied_at: datetime
    # JSON: the changes against the previous definition, one line each.
    summary: str = Field(sa_column=Column(Text, nullable=False))
    git_commit: str | None = None
    git_author: str | None = None


class PolicySetting(SQLModel, table=True):
    """A policy setting pinned in the catalog: decisions take it from here, not from a process's environment."""

    __tablename__ = "policy_setting"

    key: str = Field(primary_key=True)
    value: str
    set_by: str
    assurance: str
    set_at: datetime


class Attempt(SQLModel, table=True):
    """One try at producing a version; `running` rows whose lock is free were interrupted."""

    __tablename__ = "attempt"

    id: str = Field(primary_key=True)
    asset_key: str = Field(index=True)
    run_id: str | None = None
    requested_by: str
    started_at: datetime
    finished_at: datetime | None = None
    status: str = Field(default="running", index=True)
    version_number: int | None = None
    error: str | None = Field(default=None, sa_column=Column(Text))
    # The ids of the versions it reads, as a JSON list: no purge removes them while it runs.
    inputs: str | None = Field(default=None, sa_column=Column(Text))


class VersionRow(SQLModel, table=True):
    """A committed, immutable version of an asset."""

    __tablename__ = "version"
    # The catalog's listing counts versions by asset and status and finds each asset's newest
    # committed one from this index alone.
    __table_args__ = (
        UniqueConstraint("asset_key", "number"),
        Index("ix_version_asset_status_number", "asset_key", "status", "number"),
    )

    id: int | None = Field(default=None, primary_key=True)
    asset_key: str = Field(index=True)
    number: int
    label: str | None = None
    data_version: str = Field(index=True)
    zone: str
    # Folders relative to the lake root (`landing/sales/clients/v=3`): a home restored elsewhere
    # finds them under its own lake. Indexed: another tool's OpenLineage event names a version by it.
    path: str = Field(index=True)
    rows: int
    rows_quarantined: int = 0
    quarantine_path: str | None = None
    bytes: int
    table_schema: str = Field(sa_column=Column(Text, nullable=False))
    status: str = VersionStatus.COMMITTED.value
    created_at: datetime
    run_id: str | None = Field(default=None, index=True)
    code_version: str
    spec_hash: str
    requested_by: str
    attempt_id: str
    # Columns added after the first release carry a server default so `make_engine` can add them
    # to an existing catalog.
    # Versions recorded before identities were qualified say `unknown`.
    assurance: str = Field(default="unknown", sa_column_kwargs={"server_default": text("'unknown'")})
    label_from: str | None = None
    criticality: str = Field(default="normal", index=True, sa_column_kwargs={"server_default": text("'normal'")})
    purged_at: datetime | None = None
    # JSON: what extracting the column lineage fell back on or capped; None when none was recorded.
    column_lineage: str | None = Field(default=None, sa_column=Column(Text))

    @property
    def ref(self) -> str:
        return f"{self.asset_key}@{self.number}"

    @property
    def stored_id(self) -> int:
        """The id the catalog gave this version: every row read from the catalog, or flushed to it, has one."""
        if self.id is None:
            raise NotFound(f"{self.ref} is not in the catalog yet: it has no id")
        return self.id


class BatchRow(SQLModel, table=True):
    """A DropZone batch and the version it became."""

    __tablename__ = "batch"

    id: int | None = Field(default=None, primary_key=True)
    asset_key: str = Field(index=True)
    batch_id: str
    fingerprint: str = Field(index=True)
    version_id: int = Field(foreign_key="version.id", index=True)
    requested_by: str | None = None
    label: str | None = None
    note: str | None = None


class SourceFile(SQLModel, table=True):
    __tablename__ = "source_file"

    id: int | None = Field(default=None, primary_key=True)
    batch_pk: int = Field(foreign_key="batch.id", index=True)
    path: str  # relative to the lake root, as the DropZone is a zone of the lake
    bytes: int
    sha256: str


class RelationalRead(SQLModel, table=True):
    """The database read a landing version was ingested from: where, what, which rows, as of when."""

    __tablename__ = "relational_read"

    id: int | None = Field(default=None, primary_key=True)
    version_id: int = Field(foreign_key="version.id", index=True)
    asset_key: str = Field(index=True)
    # The dataset as OpenLineage names it: `postgres://host:port` and `database.schema.table`.
    namespace: str
    name: str
    url: str
    table_name: str | None = None
    query: str | None = Field(default=None, sa_column=Column(Text))
    snapshot_at: datetime
    incremental_column: str | None = None
    # The marks as text (ISO for dates and times): rows past `high_water_from` up to `high_water_to`.
    high_water_from: str | None = None
    high_water_to: str | None = None
    # Rows the source held without a mark, which an incremental read never reaches.
    rows_without_mark: int = 0
    partition_column: str | None = None
    partitions: int = 1


def described_read(read: RelationalRead) -> dict[str, object]:
    """A database read as the ledger and provenance show it."""
    return read.model_dump(mode="json", exclude={"id", "version_id", "asset_key"})


class LineageEdge(SQLModel, table=True):
    """`output version <- run -> input version`, indexed both ways."""

    __tablename__ = "lineage_edge"
    __table_args__ = (
        UniqueConstraint("output_version_id", "input_version_id"),
        Index("ix_edge_input", "input_version_id", "output_version_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    output_version_id: int = Field(foreign_key="version.id")
    input_version_id: int = Field(foreign_key="version.id")
    run_id: str | None = None


class VersionInputs(SQLModel, table=True):
    """A version's inputs, its lineage edges upstream as one JSON array of version ids: a walk reads
    a row per version it reaches instead of a row per edge (governance.catalog.hops)."""

    __tablename__ = "lineage_inputs"

    version_id: int = Field(primary_key=True, foreign_key="version.id", sa_column_kwargs={"autoincrement": False})
    ids: str = Field(sa_column=Column(Text, nullable=False))


class VersionDependents(SQLModel, table=True):
    """The versions built from a version, its lineage edges downstream as one JSON array of version ids."""

    __tablename__ = "lineage_dependents"

    version_id: int = Field(primary_key=True, foreign_key="version.id", sa_column_kwargs={"autoincrement": False})
    ids: str = Field(sa_column=Column(Text, nullable=False))


class ColumnLineageRow(SQLModel, table=True):
    """`version.output_column <- input version.input_column`, DIRECT or INDIRECT, with its transformation.

    `output_column` is None for a dependency of every column (a filter, join key, group-by or sort key);
    `input_version_id` is None for a field of the DropZone batch a landing version was ingested from.
    """

    __tablename__ = "column_lineage"

    id: int | None = Field(default=None, primary_key=True)
    version_id: int = Field(foreign_key="version.id", index=True)
    output_column: str | None = None
    input_version_id: int | None = Field(default=None, foreign_key="version.id")
    input_column: str
    kind: str
    transformation: str
    masking: bool = False


class SearchableEntry(SQLModel):
    """The columns a ledger entry is found by, in the hot table and in the archive index alike."""

    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    ts: str = Field(index=True)
    actor: str = Field(index=True)
    action: str = Field(index=True)
    asset_key: str | None = Field(default=None, index=True)
    version: int | None = None
    run_id: str | None = Field(default=None, index=True)
    # How the actor's identity was established: verified, asserted, system (None before it was kept).
    assurance: str | None = None


class LedgerEntry(SearchableEntry, table=True):
    """One event of the append-only, hash-chained ledger."""

    __tablename__ = "ledger"
    __table_args__ = (Index("ix_ledger_asset_version", "asset_key", "version"),)

    details: str = Field(sa_column=Column(Text, nullable=False))
    prev_hash: str
    hash: str


class LedgerSegmentRow(SQLModel, table=True):
    """A segment file holding entries rolled out of the hot ledger table."""

    __tablename__ = "ledger_segment"

    first_seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    last_seq: int = Field(index=True)
    path: str  # the file's name in the ledger's segments folder
    entries: int
    bytes: int
    last_hash: str
    created_at: datetime
    last_ts: str | None = None


class LedgerHorizon(SQLModel, table=True):
    """Where the ledger begins once its oldest segments are aged off: the last entry deleted."""

    __tablename__ = "ledger_horizon"

    seq: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    hash: str
    aged_off_at: datetime


class LedgerHead(SQLModel, table=True):
    """The ledger's name, given with its first entry, and the catalog's record of its checkpoint file:
    how many lines the file holds, the sha256 of the last and its size, signed with CUSTODY_LEDGER_KEY
    when set."""

    __tablename__ = "ledger_head"

    id: int = Field(default=1, primary_key=True, sa_column_kwargs={"autoincrement": False})
    ledger_id: str
    lines: int = 0
    last_line: str = ""
    mac: str | None = None
    updated_at: datetime
    # The file's size, so that a file edited before its last line is not taken for the one recorded.
    file_bytes: int | None = None


class ArchivedEntry(SearchableEntry, table=True):
    """The searchable columns of an entry rolled into a segment; the whole entry is in the file."""

    __tablename__ = "ledger_archive"
    __table_args__ = (Index("ix_ledger_archive_asset_version", "asset_key", "version"),)


class StreamRead(SQLModel, table=True):
    """One partition's offsets a landing version of a topic holds: from `start_offset` up to
    `end_offset` (exclusive), committed with the version, so that the next version starts where
    this one ended. Where the version before ended short of `start_offset` (`follows`), Kafka
    deleted the offsets between before any version landed them: a gap, recorded."""

    __tablename__ = "stream_read"
    __table_args__ = (UniqueConstraint("version_id", "partition"),)

    id: int | None = Field(default=None, primary_key=True)
    version_id: int = Field(foreign_key="version.id", index=True)
    asset_key: str = Field(index=True)
    topic: str
    partition: int
    start_offset: int
    end_offset: int
    records: int = 0
    first_record_at: datetime | None = None
    last_record_at: datetime | None = None
    # The end of the partition's range in the version before, or None when none landed it.
    follows: int | None = None


def described_stream(reads: Sequence[StreamRead]) -> dict[str, object]:
    """A version's offset ranges as the ledger and provenance show them."""
    return {
        "topic": reads[0].topic if reads else None,
        "partitions": [
            read.model_dump(mode="json", exclude={"id", "version_id", "asset_key", "topic"}) for read in reads
        ],
    }


class StreamTopicRow(SQLModel, table=True):
    """A Kafka topic Custody governs, and the asset that lands it: one asset's, for good."""

    __tablename__ = "stream_topic"

    topic: str = Field(primary_key=True)
    asset_key: str = Field(index=True)
    created_at: datetime
    # Whether Custody created the topic: then its every record is the asset's, from offset 0; a
    # topic taken over is the asset's from the first offset Kafka held when it first landed it.
    created: bool = False


class CatalogMigration(SQLModel, table=True):
    """A change of stored data an earlier release's catalog was brought through, once."""

    __tablename__ = "catalog_migration"

    name: str = Field(primary_key=True)
    applied_at: datetime


class ServiceSession(SQLModel, table=True):
    """A sign-in to the service: a browser's session or an API token, valid until it expires or ends.
    The cookie or token carries the id signed; the row says whose it is, so that ending it counts for
    every process that shares the catalog. The row is keyed by the id's SHA-256, never the id: a
    reader of the catalog learns nothing a cookie could be made of."""

    __tablename__ = "service_session"

    id: str = Field(primary_key=True)  # the SHA-256 of the session's id, in hex
    user: str = Field(index=True)
    method: str  # how the user proved who they are: password, ldap-bind, gateway
    kind: str  # session (a browser's cookie) or token (an API client's)
    issued_at: datetime
    expires_at: datetime
    ended_at: datetime | None = None


class LoginFailures(SQLModel, table=True):
    """Failed password checks in a row, by who is asked for from where (governance.access.throttle):
    a user from clients they have not signed in from before, or one client of theirs."""

    __tablename__ = "login_failures"

    key: str = Field(primary_key=True)
    failures: int
    last_failure_at: datetime = Field(index=True)


class SignedRequest(SQLModel, table=True):
    """A request the service signed for Dagster's webserver, by the nonce its header carries, once
    the run coordinator has taken it: a header is good for one request, and another that carries
    it is a replay."""

    __tablename__ = "signed_request"

    nonce: str = Field(primary_key=True)
    taken_at: datetime = Field(index=True)


class ForeignEvent(SQLModel, table=True):
    """An OpenLineage run event a tool Custody does not run posted to the service, kept as received
    (whether or not it joins Custody's versions): the same run, type and time is the same event."""

    __tablename__ = "foreign_event"
    __table_args__ = (UniqueConstraint("run_id", "event_type", "event_time"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    event_type: str
    event_time: str
    received_at: datetime
    # The service account whose token posted it.
    reporter: str
    body: str = Field(sa_column=Column(Text, nullable=False))


class ForeignStaticEvent(SQLModel, table=True):
    """A DatasetEvent or JobEvent a tool posted (what a dataset or job is, apart from any run), kept
    as received: the same kind, namespace, name and time is the same event."""

    __tablename__ = "foreign_static_event"
    __table_args__ = (UniqueConstraint("kind", "ident", "event_time"),)

    id: int | None = Field(default=None, primary_key=True)
    # dataset or job
    kind: str
    namespace: str = Field(sa_column=Column(Text, nullable=False))
    name: str = Field(sa_column=Column(Text, nullable=False))
    # governance.foreign.datasets.ident(namespace, name)
    ident: str = Field(index=True)
    event_time: str
    received_at: datetime
    reporter: str
    body: str = Field(sa_column=Column(Text, nullable=False))


class ForeignRun(SQLModel, table=True):
    """A run of a foreign job, as its events tell it so far."""

    __tablename__ = "foreign_run"

    run_id: str = Field(primary_key=True)
    job_namespace: str = Field(sa_column=Column(Text, nullable=False))
    job_name: str = Field(sa_column=Column(Text, nullable=False))
    # ident(job_namespace, job_name): a job's runs are found by it.
    job_ident: str | None = Field(default=None, index=True)
    producer: str = Field(sa_column=Column(Text, nullable=False))
    # The type of its latest event: START, RUNNING, COMPLETE, FAIL, ABORT or OTHER.
    state: str
    state_time: str
    started_at: str | None = None
    # The user the events say ran it (see governance.foreign.join.reported_user); None: not said.
    user: str | None = None
    # What its events' errorMessage facet said, cut short; None: nothing said.
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # The run its parent facet names (an Airflow DAG run, a Spark application), and that run's job.
    parent_run_id: str | None = Field(default=None, index=True)
    parent_job_namespace: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    parent_job_name: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    reporter: str


class ForeignDataset(SQLModel, table=True):
    """A dataset a foreign run read or wrote, by namespace, name and version (empty: none given).
    `ident` digests the namespace and name, `key` the three: long names stay out of the indexes."""

    __tablename__ = "foreign_dataset"

    id: int | None = Field(default=None, primary_key=True)
    namespace: str = Field(sa_column=Column(Text, nullable=False))
    name: str = Field(sa_column=Column(Text, nullable=False))
    version: str = ""
    ident: str = Field(index=True)
    key: str = Field(unique=True)
    # Where in the lake it is, relative to the root, for a dataset there: a DropZone batch a
    # foreign job wrote is found by it.
    location: str | None = Field(default=None, index=True)


class ForeignIO(SQLModel, table=True):
    """A dataset a foreign run read (input) or wrote (output); an input that is a Custody version
    names it in `version_id`, or, until that version is committed, in `awaits_…`."""

    __tablename__ = "foreign_io"
    __table_args__ = (UniqueConstraint("run_id", "direction", "dataset_id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    direction: str
    dataset_id: int = Field(foreign_key="foreign_dataset.id", index=True)
    version_id: int | None = Field(default=None, foreign_key="version.id", index=True)
    # The version an input names that was not committed when its event came (asset key and number):
    # joined, and held to the readers' policy, once it is (see governance.foreign.waiting).
    awaits_asset: str | None = Field(default=None, index=True)
    awaits_number: int | None = None


class ForeignColumn(SQLModel, table=True):
    """A column of a dataset a foreign run wrote and an input field it derives from, as the run's
    columnLineage facet says: DIRECT or INDIRECT and how. `output_column` None: a dependency of
    every column (a filter, join or sort of the whole dataset). `key` digests the row."""

    __tablename__ = "foreign_column"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(index=True)
    dataset_id: int = Field(foreign_key="foreign_dataset.id", index=True)
    output_column: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    input_namespace: str = Field(sa_column=Column(Text, nullable=False))
    input_name: str = Field(sa_column=Column(Text, nullable=False))
    # ident(input_namespace, input_name): the run's input of that name, and so the Custody version it is.
    input_ident: str
    input_field: str = Field(sa_column=Column(Text, nullable=False))
    kind: str
    transformation: str
    masking: bool = False
    key: str = Field(unique=True)
