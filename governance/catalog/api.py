"""The Catalog API: specs, attempts, versions, batches, lineage edges, all through one engine."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlmodel import Session, col, select

from governance import ledger
from governance.catalog.engine import (
    BUSY_TIMEOUT_SECONDS,
    READ_ONLY,
    failure_of,
    immutable_reader,
    make_engine,
    read_only,
)
from governance.catalog.group import Append, Committed, GroupCommit, Outcome, Work
from governance.catalog.models import (
    AssetRow,
    Attempt,
    BatchRow,
    LineageEdge,
    PolicySetting,
    RelationalRead,
    SourceFile,
    SpecSnapshot,
    StreamRead,
    VersionRow,
)
from governance.catalog.owed import failed_checkpoints, failed_lock, owed_checkpoints, take_failed
from governance.catalog.savepoint import savepoint
from governance.catalog.states import VersionStatus
from governance.checkpoints import Checkpoints
from governance.config import Settings
from governance.errors import (
    CatalogStorageFailed,
    CatalogUnavailable,
    CommitUnknown,
    CustodyError,
    DuplicateBatch,
    InvalidInput,
    NotFound,
    SettingsChanged,
    TransactionLost,
)
from governance.locks import advisory_lock, file_lock_within
from governance.zones import AssetKey, VersionRef

if TYPE_CHECKING:  # the specs' model loads YAML and the directory: reading the catalog needs neither
    from governance.spec import Spec

# The savepoint of a recorded work, within its batch's transaction.
WORK_SAVEPOINT = "custody_work"
# What a decision recorded under settings an admin changed meanwhile is told: the caller decides again.
STALE_SETTINGS = "the policy settings changed while this request was decided, so nothing of it was recorded: try again"


def utcnow() -> datetime:
    return datetime.now(UTC)


def utc_from(stored: str | datetime) -> datetime:
    """A time the database gave (as text in JSON or from SQLite's driver, or as a time without a
    zone), in UTC as the models give it back: the catalog keeps UTC, and SQLite keeps no zone."""
    moment = datetime.fromisoformat(stored) if isinstance(stored, str) else stored
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


# Whether this thread (or task) is inside a write transaction of a catalog: see `Catalog.record`.
_writing: ContextVar[bool] = ContextVar("custody_catalog_writing", default=False)
# One writer at a time per SQLite database and process: the threads of a process (the service's)
# queue here and go on as soon as the last one commits, where SQLite's busy handler would have them
# sleep and retry. Other processes still wait on its busy timeout.
_writers: dict[str, threading.RLock] = {}
_writers_lock = threading.Lock()
_held = threading.local()
# The ledger appends of this process's threads, by database and checkpoint file: see `Catalog.record`.
_groups: dict[tuple[str, Checkpoints | None, Path | None], GroupCommit] = {}
CHECKPOINT_FAILURES = (CustodyError, OSError, SQLAlchemyError)
STATUS_OF = select(col(VersionRow.status)).where(col(VersionRow.id) == bindparam("id"))


@cache
def _shared_engine(url: str) -> Engine:
    # Every Dagster run gets fresh resources; building the engine again would redo its setup.
    return make_engine(url)


@contextmanager
def _one_writer(engine: Engine | None) -> Iterator[None]:
    """Hold the writer lock of a SQLite `engine` (None: a reader, which needs none): this process's,
    then the one its processes share, a file beside the database. SQLite's own wait for a busy
    database sleeps longer and longer between tries: a busy service's processes, each writing many
    times a second, would keep each other waiting tens of milliseconds for a lock let go at once."""
    if engine is None or engine.dialect.name != "sqlite":
        yield
        return
    url = str(engine.url)
    with _writers_lock:
        lock = _writers.setdefault(url, threading.RLock())
    with lock:
        database, holding = engine.url.database, _holding()
        if url in holding or not database or database == ":memory:":
            yield
            return
        with ExitStack() as held:
            writer = Path(f"{database}-writer")
            try:
                held.enter_context(file_lock_within(writer, BUSY_TIMEOUT_SECONDS))
            except TimeoutError as err:
                where = engine.url.render_as_string(hide_password=True)
                raise CatalogUnavailable(
                    f"the catalog at {where} is unavailable: another process has been writing to it for "
                    f"{BUSY_TIMEOUT_SECONDS} s"
                ) from err
            except PermissionError as err:
                raise read_only(engine.url, f"its writer lock {writer} cannot be made: {err.strerror}") from err
            holding.add(url)
            held.callback(holding.discard, url)
            yield


def _holding() -> set[str]:
    """The SQLite catalogs whose shared writer lock this thread holds."""
    if not hasattr(_held, "urls"):
        _held.urls = set()
    urls: set[str] = _held.urls
    return urls


class Catalog:
    """Everything Custody knows about assets and their versions."""

    def __init__(self, engine: Engine, checkpoints: Checkpoints | None = None, segments: Path | None = None):
        self.engine = engine
        self._reader = engine.execution_options(**{READ_ONLY: True})
        self.checkpoints = checkpoints
        # The folder of the ledger's segment files, which the catalog names relative to it.
        self.segments = segments

    @classmethod
    def from_url(cls, url: str, checkpoints: Checkpoints | None = None, segments: Path | None = None) -> Catalog:
        """The catalog at `url`; one engine (and its connection pool) per URL and process. With
        `checkpoints`, the ledger is checkpointed there every `checkpoints.every` entries; its
        rolled-over entries are read from the files in `segments`."""
        return cls(_shared_engine(url), checkpoints, segments)

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str]) -> Catalog:
        """The catalog the settings name, its ledger checkpointed and rolled over where they say. A
        home that does not exist yet is made for its owner alone: it holds the catalog, the ledger's
        checkpoints and the directory's copy."""
        settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        checkpoints = Checkpoints.under(settings.checkpoint_folder, environ)
        return cls.from_url(settings.catalog_url, checkpoints, settings.ledger_segments)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises. Entries it
        appended are checkpointed once committed when the checkpoint file says it is due, else
        when the enclosing `closing_checkpoint` block ends.

        A due checkpoint that cannot be written does not make the transaction look failed: it has
        committed, and a caller that undid its own work on an error (moved a published version
        back) would leave the catalog and the lake disagreeing. The checkpoint is written, or its
        failure raised, where the next work begins: the next session, or the end of the command or
        run."""
        self._retry_failed_checkpoint()
        with self._transaction() as session:
            yield session
        if appended := session.info.get(ledger.APPENDED):
            self._committed(*appended)

    def _committed(self, first: int, last: int, last_hash: str) -> None:
        """Entries `first`..`last` are committed: checkpoint them if it is due, else owe it."""
        if not self.checkpoints:
            return
        if self.checkpoints.due(first, last):
            self._checkpoint_committed(self.checkpoints, last, last_hash)
        elif (owed := owed_checkpoints.get()) is not None:
            owed[self.checkpoints.path] = (self, last, last_hash)

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """One transaction that only reads: the catalog as it was when it began. On SQLite it holds
        no lock a writer or another reader waits for. It must write nothing. A checkpoint that
        could not be written is tried again first, as before every session."""
        self._retry_failed_checkpoint()
        began = False
        try:
            with self._transaction(self._reader) as session:
                began = True
                yield session
        except CatalogStorageFailed:
            # A file system too full for a reader's shared-memory file: the file alone is read.
            fallback = None if began else immutable_reader(self.engine)
            if fallback is None:
                raise
            with self._transaction(fallback.execution_options(**{READ_ONLY: True})) as session:
                yield session

    @contextmanager
    def _transaction(self, engine: Engine | None = None) -> Iterator[Session]:
        writing = _writing.set(True) if engine is None else None
        try:
            with (
                _one_writer(self.engine if engine is None else None),
                Session(engine or self.engine, expire_on_commit=False) as session,
            ):
                session.info[ledger.CHECKPOINTS] = self.checkpoints
                session.info[ledger.SEGMENTS] = self.segments
                committing = False
                try:
                    with session.begin():
                        session.connection()  # now: a database that cannot be opened fails before the work
                        yield session
                        session.flush()
                        committing = engine is None  # a transaction that only read has nothing to lose
                except DBAPIError as err:
                    failure = failure_of(self.engine.url, err)
                    if failure is None:
                        raise
                    if committing and isinstance(failure, CatalogUnavailable):
                        # The database may have committed before the connection went: only it can tell.
                        raise CommitUnknown(f"{failure}, while committing") from err
                    raise failure from err
        finally:
            if writing is not None:
                _writing.reset(writing)

    def _checkpoint_committed(self, checkpoints: Checkpoints, seq: int, entry_hash: str) -> None:
        try:
            self.record_checkpoint(seq, entry_hash)
        except CHECKPOINT_FAILURES:
            with failed_lock:
                failed_checkpoints[checkpoints.path] = (self, seq, entry_hash)
            if (owed := owed_checkpoints.get()) is not None:  # so that the enclosing command fails with it
                owed[checkpoints.path] = (self, seq, entry_hash)

    def _retry_failed_checkpoint(self) -> None:
        if failed_checkpoints and self.checkpoints is not None:
            for catalog, seq, entry_hash in take_failed([self.checkpoints.path]).values():
                catalog.record_checkpoint(seq, entry_hash)

    def record(
        self, events: Sequence[ledger.Event], settings: Mapping[str, str] | None = None
    ) -> Sequence[ledger.Appended]:
        """Append `events` to the ledger, in order, in a transaction of their own that the other
        threads of this process appending at the same moment share: a busy service writes once for
        many decisions. Returns once they are committed, with where they went.

        With `settings` (the policy settings the events' decisions were made under), only if those
        are still the pinned ones inside that transaction; else none of them, and SettingsChanged.

        A thread inside a write transaction of a catalog may not record: queued behind another
        thread's batch, it would wait for the writer it holds itself."""
        return self._record(Append(events, settings)).appended

    def record_then(self, events: Sequence[ledger.Event], work: Work, settings: Mapping[str, str] | None = None) -> Any:
        """Append `events` as `record` does, then do `work(session)` in the same transaction: what
        a decision among them allowed, committed with it or not at all. `work` returns its result
        (returned here) and the entries it calls for, appended after it. Refused settings leave it
        undone; what it raises is raised here, its changes undone and `events` committed, the
        other threads' entries and work in the transaction untouched. `work` writes with the
        transaction's own statements (its connection's), not through the ORM's objects: its
        savepoint is the driver's, which the ORM does not know of."""
        return self._record(Append(events, settings, work)).result

    def _record(self, append: Append) -> Committed:
        if _writing.get():
            # It would wait for the writer it holds: a bug of the caller, told at once.
            raise RuntimeError("ledger entries are recorded in a transaction of their own: record them before or after")
        self._retry_failed_checkpoint()  # by this thread: its failure is this thread's alone
        with _writers_lock:
            group = _groups.setdefault((str(self.engine.url), self.checkpoints, self.segments), GroupCommit())
        committed = group.append(append, self._append)
        appended, batch = committed.appended, committed.batch
        if batch:
            # This thread committed the batch: its checkpoint, due or owed, is this thread's to see to.
            self._committed(batch[0].seq, batch[-1].seq, batch[-1].hash)
        elif appended and self.checkpoints and (owed := owed_checkpoints.get()) is not None:
            # Another thread committed them and checkpointed or owes them; the command that brought
            # them owes their checkpoint too.
            owed[self.checkpoints.path] = (self, appended[-1].seq, appended[-1].hash)
        if committed.refused:
            raise SettingsChanged(STALE_SETTINGS)
        if committed.failed is not None:
            raise committed.failed
        return committed

    def _append(self, appends: Sequence[Append]) -> list[Outcome | None]:
        """One transaction of a batch: what comes before and after it (checkpoints) is each calling
        thread's own, so that a checkpoint's failure fails none of the others' decisions. Each
        append's outcome, or None for one whose settings are no longer pinned, left out."""
        with self._transaction() as session:
            pinned: dict[str, str] = {}
            if any(append.settings is not None for append in appends):
                # The ledger's lock first: on PostgreSQL, an admin's change of the settings appends to
                # the ledger too, so it is either committed and read here, or follows these entries.
                ledger.lock(session)
                pinned = _pinned_values(session)
            held = [_still_pinned(append.settings, pinned) for append in appends]
            entries = iter(ledger.append_many(session, [e for a, ok in zip(appends, held) if ok for e in a.events]))
            appended = [[next(entries) for _ in append.events] if ok else None for append, ok in zip(appends, held)]
            return [
                None if own is None else _worked(session, own, append.work)
                for append, own in zip(appends, appended, strict=True)
            ]

    def checkpoint(self) -> None:
        """Checkpoint the ledger's newest entry now: at the end of a run, whatever its length."""
        if self.checkpoints is None:
            return
        with self.reading() as session:
            last = ledger.last_entry(session)
        if last is not None:
            self.record_checkpoint(last.seq, last.hash)

    def checkpoint_file(self) -> Checkpoints:
        """The file the ledger is checkpointed in; a catalog opened without one has none to use."""
        if self.checkpoints is None:
            raise InvalidInput("this catalog was opened without a ledger checkpoint file")
        return self.checkpoints

    def record_checkpoint(self, seq: int, entry_hash: str, *, aged_off: bool = False) -> None:
        """Append a checkpoint of entry `seq` to the file, then record the file's new head, in the
        transaction that read the head. A file that does not continue that head is left alone."""
        checkpoints = self.checkpoint_file()
        with checkpoints.locked(), self._transaction() as session:
            head = ledger.head(session)
            end = checkpoints.continuing(head)
            name = head.ledger if head else uuid.uuid4().hex
            genesis = None
            if not end.anchored:
                # A head without lines came with the ledger's first entry: the file pins it from the
                # start. Without a head, the ledger is older than its file: it pins what is there now.
                genesis = (name, 0, ledger.GENESIS) if head else (name, seq, entry_hash)
            kept = checkpoints.head(name, checkpoints.extend(end, seq, entry_hash, aged_off=aged_off, genesis=genesis))
            if kept != head:
                ledger.keep_head(session, kept)
        owed = owed_checkpoints.get()
        if owed and checkpoints.path in owed and owed[checkpoints.path][1] <= seq:
            del owed[checkpoints.path]

    def register_spec(
        self, session: Session, spec: Spec, actor: str, run_id: str | None = None, assurance: str | None = None
    ) -> None:
        """Keep the asset's current spec and a snapshot of every spec it ever had, in the caller's transaction."""
        key = str(spec.key)
        row = session.get(AssetRow, key)
        if row is not None and row.spec_hash == spec.hash:
            return
        body = spec.as_json
        action = ledger.Action.SPEC_REGISTERED if row is None else ledger.Action.SPEC_CHANGED
        previous = None if row is None else row.spec_hash
        session.merge(
            AssetRow(
                key=key,
                domain=spec.key.domain,
                name=spec.key.name,
                zone=spec.body.zone,
                spec_hash=spec.hash,
                spec_json=body,
                updated_at=utcnow(),
            )
        )
        known = session.exec(
            select(SpecSnapshot).where(SpecSnapshot.asset_key == key, SpecSnapshot.spec_hash == spec.hash)
        ).first()
        if known is None:
            session.add(SpecSnapshot(asset_key=key, spec_hash=spec.hash, spec_json=body, recorded_at=utcnow()))
        ledger.append(
            session,
            actor=actor,
            action=action,
            asset=key,
            run_id=run_id,
            assurance=assurance,
            details={"spec_hash": spec.hash, "previous_hash": previous, "file": str(spec.file)},
        )

    def start_attempt(
        self, attempt_id: str, key: AssetKey, run_id: str | None, requested_by: str, inputs: Sequence[VersionRow] = ()
    ) -> None:
        """The attempt's row, naming the versions it reads, once none of them is purged or being
        purged: taken in turn with purges (`lock_protection`), which leave alone what it reads."""
        with self.session() as session:
            if inputs:
                self.lock_protection(session)
                ids = [row.stored_id for row in inputs]
                gone = session.exec(
                    select(VersionRow).where(
                        col(VersionRow.id).in_(ids), VersionRow.status != VersionStatus.COMMITTED.value
                    )
                ).first()
                if gone is not None:
                    raise NotFound(f"input {gone.ref} was purged; materialize {key} again to read the newest")
            session.add(
                Attempt(
                    id=attempt_id,
                    asset_key=str(key),
                    run_id=run_id,
                    requested_by=requested_by,
                    started_at=utcnow(),
                    inputs=json.dumps(sorted(row.stored_id for row in inputs)) if inputs else None,
                )
            )

    def finish_attempt(
        self, session: Session, attempt_id: str, status: str, *, version: int | None = None, error: str | None = None
    ) -> bool:
        """End a running attempt as `status`; whether it was running. One that has ended (committed,
        even though the process that committed it failed afterwards) keeps how it ended."""
        attempt = session.get(Attempt, attempt_id, with_for_update=True)
        if attempt is None or attempt.status != "running":
            return False
        attempt.status, attempt.finished_at = status, utcnow()
        attempt.version_number, attempt.error = version, error
        session.add(attempt)
        return True

    def running_attempts(self) -> list[Attempt]:
        with self.reading() as session:
            return list(session.exec(select(Attempt).where(Attempt.status == "running")))

    def attempt_statuses(self) -> dict[str, str]:
        """Every attempt's status, by its id."""
        with self.reading() as session:
            return dict(session.exec(select(Attempt.id, Attempt.status)).all())

    def next_number(self, session: Session, key: AssetKey) -> int:
        """The number the next version of `key` gets; holds the asset's lock until the transaction ends.

        SQLite transactions already begin with the write lock; PostgreSQL takes a per-asset advisory lock.
        """
        advisory_lock(session, str(key))
        top = session.exec(select(func.max(VersionRow.number)).where(VersionRow.asset_key == str(key))).one()
        return (top or 0) + 1

    def lock_protection(self, session: Session) -> None:
        """Serialize status changes with purges, so a purge never removes what just became protected.

        SQLite transactions already begin with the write lock; PostgreSQL takes an advisory lock.
        """
        advisory_lock(session, "custody.protection")

    def versions(self, key: AssetKey) -> list[VersionRow]:
        with self.reading() as session:
            query = select(VersionRow).where(VersionRow.asset_key == str(key)).order_by(col(VersionRow.number))
            return list(session.exec(query))

    def versions_page(self, key: AssetKey, limit: int, before: int | None = None) -> list[VersionRow]:
        """The newest `limit` versions numbered below `before` (any, without it), oldest first."""
        with self.reading() as session:
            query = select(VersionRow).where(VersionRow.asset_key == str(key))
            if before is not None:
                query = query.where(VersionRow.number < before)
            return list(reversed(session.exec(query.order_by(col(VersionRow.number).desc()).limit(limit)).all()))

    def iter_versions(self, key: AssetKey) -> Iterator[VersionRow]:
        """Every version, oldest first, read a thousand at a time: for lists too long to hold."""
        with self.reading() as session:
            query = select(VersionRow).where(VersionRow.asset_key == str(key)).order_by(col(VersionRow.number))
            yield from session.exec(query.execution_options(yield_per=1000))

    def version_count(self, key: AssetKey) -> int:
        with self.reading() as session:
            return session.exec(
                select(func.count()).select_from(VersionRow).where(VersionRow.asset_key == str(key))
            ).one()

    def committed_numbers(self, key: AssetKey) -> set[int]:
        with self.reading() as session:
            query = select(VersionRow.number).where(VersionRow.asset_key == str(key))
            return set(session.exec(query))

    def version(self, ref: VersionRef) -> VersionRow:
        with self.reading() as session:
            row = self.find_version(session, ref)
        if row is None:
            raise NotFound(f"no version {ref}: {self._known_versions(ref.key)}")
        return row

    def version_at(self, stored: str) -> VersionRow | None:
        """The version whose files are at `stored`, a location relative to the lake."""
        with self.reading() as session:
            return session.exec(select(VersionRow).where(VersionRow.path == stored)).first()

    def status_of(self, version_id: int) -> str | None:
        """A version's status now, by its id: one lookup by the key, for a caller that asks it of
        every request (a signed read of a version's file)."""
        with self._reader.connect() as connection:
            return connection.execute(STATUS_OF, {"id": version_id}).scalar_one_or_none()

    def find_version(self, session: Session, ref: VersionRef) -> VersionRow | None:
        query = select(VersionRow).where(VersionRow.asset_key == str(ref.key), VersionRow.number == ref.number)
        return session.exec(query).first()

    def latest(self, key: AssetKey) -> VersionRow:
        with self.reading() as session:
            row = session.exec(
                select(VersionRow)
                .where(VersionRow.asset_key == str(key))
                .order_by(col(VersionRow.number).desc())
                .limit(1)
            ).first()
        if row is None:
            raise NotFound(f"{key} has no committed version yet")
        return row

    def newest_committed(self, key: AssetKey) -> VersionRow | None:
        with self.reading() as session:
            return session.exec(
                select(VersionRow)
                .where(VersionRow.asset_key == str(key), VersionRow.status == VersionStatus.COMMITTED.value)
                .order_by(col(VersionRow.number).desc())
                .limit(1)
            ).first()

    def versions_of_run(self, run_id: str) -> list[VersionRow]:
        """The versions a run committed."""
        with self.reading() as session:
            query = select(VersionRow).where(VersionRow.run_id == run_id).order_by(col(VersionRow.id))
            return list(session.exec(query))

    def newest_committed_by_asset(self) -> dict[str, VersionRow]:
        """Every asset's newest committed version, by asset key."""
        top = (
            select(col(VersionRow.asset_key), func.max(VersionRow.number).label("number"))
            .where(col(VersionRow.status) == VersionStatus.COMMITTED.value)
            .group_by(col(VersionRow.asset_key))
            .subquery()
        )
        query = select(VersionRow).join(
            top, and_(col(VersionRow.asset_key) == top.c.asset_key, col(VersionRow.number) == top.c.number)
        )
        with self.reading() as session:
            return {row.asset_key: row for row in session.exec(query)}

    def input_ids(self, version_id: int | None) -> set[int]:
        """The ids of the versions a version was made from."""
        with self.reading() as session:
            query = select(LineageEdge.input_version_id).where(LineageEdge.output_version_id == version_id)
            return set(session.exec(query))

    def pinned(self, key: AssetKey, run_id: str | None, started_at: datetime) -> VersionRow:
        """The version a run reads: the one it produced itself, else the newest committed before it began."""
        with self.reading() as session:
            base = select(VersionRow).where(VersionRow.asset_key == str(key))
            own = (
                session.exec(base.where(VersionRow.run_id == run_id).order_by(col(VersionRow.number).desc())).first()
                if run_id
                else None
            )
            row = (
                own
                or session.exec(
                    base.where(VersionRow.created_at <= started_at).order_by(col(VersionRow.number).desc()).limit(1)
                ).first()
            )
        if row is None:
            raise NotFound(f"input {key} has no committed version to read; ingest or materialize it first")
        if row.status != VersionStatus.COMMITTED:
            raise NotFound(f"input {row.ref} was purged; materialize {key} again or ingest a new batch")
        return row

    def _known_versions(self, key: AssetKey) -> str:
        numbers = sorted(self.committed_numbers(key))
        if not numbers:
            return f"{key} has no committed version" if self.has_asset(key) else f"unknown asset {key}"
        return f"{key} has versions {numbers[0]}..{numbers[-1]}"

    def roles_of(self, keys: list[AssetKey]) -> dict[AssetKey, dict[str, str]]:
        """The owner, producer and consumer groups of each registered asset, from its current spec."""
        with self.reading() as session:
            rows = session.exec(select(AssetRow).where(col(AssetRow.key).in_([str(k) for k in keys])))
            return {AssetKey.parse(row.key): json.loads(row.spec_json).get("roles", {}) for row in rows}

    def has_asset(self, key: AssetKey) -> bool:
        with self.reading() as session:
            return session.get(AssetRow, str(key)) is not None

    def batch_by_id(self, key: AssetKey, batch_id: str) -> tuple[BatchRow, VersionRow] | None:
        return self._batch_where(key, BatchRow.batch_id == batch_id)

    def batch_by_fingerprint(self, key: AssetKey, fingerprint: str) -> tuple[BatchRow, VersionRow] | None:
        return self._batch_where(key, BatchRow.fingerprint == fingerprint)

    def _batch_where(self, key: AssetKey, condition) -> tuple[BatchRow, VersionRow] | None:
        with self.reading() as session:
            found = session.exec(
                select(BatchRow, VersionRow)
                .join(VersionRow, col(VersionRow.id) == col(BatchRow.version_id))
                .where(BatchRow.asset_key == str(key), condition)
                .order_by(col(VersionRow.number))
            ).first()
        return (found[0], found[1]) if found else None

    def batch_fingerprints(self, key: AssetKey) -> frozenset[str]:
        with self.reading() as session:
            return frozenset(session.exec(select(BatchRow.fingerprint).where(BatchRow.asset_key == str(key))))

    def ingested_batch_ids(self, key: AssetKey) -> set[str]:
        with self.reading() as session:
            return set(session.exec(select(BatchRow.batch_id).where(BatchRow.asset_key == str(key))))

    def sources_of(self, version_ids: list[int]) -> dict[int, tuple[BatchRow, list[SourceFile]]]:
        with self.reading() as session:
            batches = list(session.exec(select(BatchRow).where(col(BatchRow.version_id).in_(version_ids))))
            files = list(
                session.exec(
                    select(SourceFile)
                    .where(col(SourceFile.batch_pk).in_([b.id for b in batches]))
                    .order_by(col(SourceFile.path))
                )
            )
        by_batch: dict[int | None, list[SourceFile]] = {}
        for f in files:
            by_batch.setdefault(f.batch_pk, []).append(f)
        return {b.version_id: (b, by_batch.get(b.id, [])) for b in batches}

    def last_mark(self, key: AssetKey, column: str, name: str) -> str | None:
        """Where the next incremental read of `name` on `column` starts: the high-water mark of the
        newest version read so. A mark of another column or table is no mark for this one."""
        with self.reading() as session:
            return _newest_mark(session, key, column, name)

    def reads_of(self, version_ids: list[int]) -> dict[int, RelationalRead]:
        """The database reads the versions `version_ids` were ingested from, by version id."""
        with self.reading() as session:
            reads = session.exec(select(RelationalRead).where(col(RelationalRead.version_id).in_(version_ids)))
            return {read.version_id: read for read in reads}


def offsets_landed(session: Session, key: AssetKey, topic: str) -> dict[int, int]:
    """Where the next landing of `topic` starts, by partition: the end of the newest range landed.
    Each version starts where the one before ended, so the newest end is the highest."""
    rows = session.exec(
        select(StreamRead.partition, func.max(StreamRead.end_offset))
        .where(StreamRead.asset_key == str(key), StreamRead.topic == topic)
        .group_by(col(StreamRead.partition))
    )
    return {partition: end for partition, end in rows}


def check_offsets_unchanged(session: Session, key: AssetKey, reads: Sequence[StreamRead]) -> None:
    """Refuse to commit ranges that do not start where the versions committed so far end: another
    run landed records meanwhile, and the two versions would hold the same ones."""
    landed = offsets_landed(session, key, reads[0].topic)
    moved = [
        read.partition
        for read in reads
        if (landed[read.partition] != read.follows if read.partition in landed else read.follows not in (None, 0))
    ]
    if moved:
        raise DuplicateBatch(
            f"another run of {key} landed records of {reads[0].topic} (partition {moved[0]}) while this one "
            "read them; land again to read past them"
        )


def _newest_mark(session: Session, key: AssetKey, column: str, name: str) -> str | None:
    return session.exec(
        select(RelationalRead.high_water_to)
        .join(VersionRow, col(VersionRow.id) == col(RelationalRead.version_id))
        .where(
            RelationalRead.asset_key == str(key),
            RelationalRead.incremental_column == column,
            RelationalRead.name == name,
        )
        .order_by(col(VersionRow.number).desc())
        .limit(1)
    ).first()


def check_mark_unchanged(session: Session, key: AssetKey, read: RelationalRead) -> None:
    """Refuse to commit an incremental read whose starting mark another version has moved past
    meanwhile: the two would hold the same rows."""
    if read.incremental_column is None:
        return
    now = _newest_mark(session, key, read.incremental_column, read.name)
    if now != read.high_water_from:
        raise DuplicateBatch(
            f"another run of {key} committed rows of {read.name} up to {read.incremental_column} "
            f"{now} while this one read them; ingest again to read past it"
        )


def _pinned_values(session: Session) -> dict[str, str]:
    """The policy settings pinned now, by key: what a conditional record checks inside its transaction."""
    rows = session.connection().exec_driver_sql(f'SELECT "key", "value" FROM {PolicySetting.__tablename__}')
    return {key: value for key, value in rows}


def _worked(session: Session, appended: list[ledger.Appended], work: Work | None) -> Outcome:
    """Do an append's work in a savepoint of its own: what it raises undoes its changes and is its
    own thread's to raise, while the batch's entries, its own among them, are committed. A savepoint
    a failed work leaves the database unable to go back to fails the whole batch (TransactionLost)."""
    if work is None:
        return Outcome(appended)
    session.flush()  # the batch's own objects (a new ledger's head), before the work's savepoint
    connection = session.connection()
    reached = ledger.mark(session)
    through_orm = False
    try:
        with (
            savepoint(connection.connection.cursor(), WORK_SAVEPOINT, connection.dialect.loaded_dbapi.Error),
            session.no_autoflush,
        ):
            result, entries = work(session)
            through_orm = bool(session.new or session.dirty or session.deleted)
            outcome = Outcome([*appended, *ledger.append_many(session, entries)], result)
    except TransactionLost:
        raise
    except Exception as err:  # noqa: BLE001 - not swallowed: the thread that brought the work raises it
        # What it appended is undone: the next append of the batch follows the entries before it.
        ledger.rewind(session, reached)
        through_orm = through_orm or bool(session.new or session.dirty or session.deleted)
        outcome = Outcome(appended, failed=err)
    if through_orm:
        # The savepoint is the driver's: the ORM's objects would outlive its rollback. A bug of the
        # work, told at once: the whole batch fails, nothing written.
        raise RuntimeError("a recorded work writes with the transaction's statements, not through the ORM")
    return outcome


def _still_pinned(settings: Mapping[str, str] | None, pinned: Mapping[str, str]) -> bool:
    return settings is None or all(pinned.get(key) == value for key, value in settings.items())
