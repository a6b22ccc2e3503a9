"""Run events kept as received, then joined: each run's job, state and reported user; the datasets
it read and wrote; and, for an input that is a Custody version, that version.

An input is a Custody version when its name is a version's location in the lake (the folder, or a
file in it: `file` /lake/landing/sales/clients/v=3, or `s3://bucket` prefix/…), or the asset's
folder as Custody's own events name it with the version in its `version` facet (with none, each
version the folder holds), or the asset's Iceberg table at the version's snapshot
(governance.foreign.tables). A run that read a version under a reported user who holds no role on
its asset is recorded (`read.outside-policy`)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache, cached_property
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from governance import ledger
from governance.access.guard import ledger_actor
from governance.catalog import Catalog
from governance.catalog.jsonrows import marker
from governance.catalog.savepoint import savepoint
from governance.catalog.states import VersionStatus
from governance.errors import CustodyError, NotJoinedTogether, TransactionLost, error_summary, shown
from governance.foreign import columns
from governance.foreign.datasets import ENDED, INPUT, OUTPUT, digest, ident
from governance.foreign.events import CONTROL, MAX_NAME, RunEvent, moment
from governance.foreign.tables import SNAPSHOTS, table_of
from governance.lake.iceberg import TAG_PREFIX
from governance.runs import Assurance
from governance.zones import LARGEST_NUMBER, VERSION_DIR, AssetKey, Lake, Zone, version_number

ZONES = frozenset(zone.value for zone in Zone)
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
OUTSIDE_POLICY = "read.outside-policy"
# How a foreign run's report reached Custody, as the ledger names channels.
FOREIGN_CHANNEL = "openlineage"
# Whether a reported user may read an asset: None if so, else why not.
Judge = Callable[[str | None, str], str | None]

STORE = "INSERT INTO foreign_event {rows} ON CONFLICT DO NOTHING RETURNING run_id, event_type, event_time"
RUN_COLUMNS = 'state, state_time, started_at, "user", error, parent_run_id, parent_job_namespace, parent_job_name'
RUNS = f"SELECT run_id, {RUN_COLUMNS} FROM foreign_run WHERE run_id IN ({{among}})"
RUN_JOBS = "SELECT run_id, job_namespace, job_name FROM foreign_run WHERE run_id IN ({among})"
NEW_RUNS = "INSERT INTO foreign_run {rows}"
RUN_NOW = (
    'UPDATE foreign_run SET state = {state}, state_time = {state_time}, started_at = {started_at}, "user" = {user}, '
    "error = {error}, parent_run_id = {parent_run_id}, parent_job_namespace = {parent_job_namespace}, "
    "parent_job_name = {parent_job_name} WHERE run_id = {run_id}"
)
# The most characters of a failed run's error message kept: its stack trace stays in the event.
LONGEST_ERROR = 2_000
DATASETS = "SELECT key, id FROM foreign_dataset WHERE key IN ({among})"
NEW_DATASETS = "INSERT INTO foreign_dataset {rows} ON CONFLICT DO NOTHING RETURNING key, id"
# What a join may fail with, that is the event's own and not the transaction's.
JOIN_ERRORS = (SQLAlchemyError, CustodyError, ValueError, OverflowError)
# The longest location kept: an index entry must stay small on every backend.
LONGEST_LOCATION = 1_000
IO = "INSERT INTO foreign_io {rows} ON CONFLICT DO NOTHING RETURNING run_id, direction, dataset_id"
VERSIONS_AT = "SELECT path, id, asset_key, number FROM version WHERE path IN ({among})"
VERSION_OF = (
    "SELECT id, asset_key, number FROM version WHERE asset_key = {asset} AND number = {number} AND zone = {zone}"
)
VERSION_NUMBERED = "SELECT id, asset_key, number FROM version WHERE asset_key = {asset} AND number = {number}"
ASSET_IN_ZONE = "SELECT 1 FROM asset WHERE key = {asset} AND zone = {zone}"
VERSIONS_HELD = (
    "SELECT id, asset_key, number FROM version WHERE asset_key = {asset} AND zone = {zone} AND status = {status} "
    "ORDER BY number"
)
# The most rows one statement writes or looks up: its parameters stay far below any driver's limit.
ROWS_AT_ONCE = 500
# The joining's own savepoint: a transaction may keep the events of several requests, one after the other.
SAVEPOINT = "custody_joining"
REQUEST_SAVEPOINT = "custody_request"


@dataclass(frozen=True)
class Resolved:
    """What an input dataset is to Custody: a version (`ref`), one that is not committed yet (`ref`
    without `version_id`: `waiting`), or why it is none (`problem`), or neither: a dataset outside
    the lake."""

    version_id: int | None = None
    asset: str | None = None
    number: int | None = None
    problem: str | None = None

    @property
    def ref(self) -> str | None:
        return None if self.asset is None else f"{self.asset}@{self.number}"

    @property
    def waiting(self) -> bool:
        return self.asset is not None and self.version_id is None


@dataclass(frozen=True)
class Outside:
    """A version a run read under a user who may not read it, and why not."""

    run_id: str
    job: str
    producer: str
    read: Resolved
    user: str | None
    reason: str
    reporter: str


@dataclass(frozen=True)
class Received:
    """What became of one event: stored, or already stored; what each input resolved to; and why
    it could not be joined, if it could not."""

    run_id: str
    event_type: str
    stored: bool
    inputs: list[dict[str, Any]] = field(default_factory=list)
    unjoined: str | None = None
    # Why the event was refused, neither kept nor joined (the others of its request were).
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.refused is not None:
            return {"runId": self.run_id, "eventType": self.event_type, "received": "refused", "reason": self.refused}
        said = {
            "runId": self.run_id,
            "eventType": self.event_type,
            "received": "stored" if self.stored else "already stored",
            "inputs": self.inputs,
        }
        return said if self.unjoined is None else {**said, "not joined": self.unjoined}


class Sql:
    """The transaction's own DB-API cursor, a statement's `{name}`s written as its driver reads named
    parameters: SQLAlchemy's handling of each of these small statements costs more than the
    database's work for it."""

    def __init__(self, session: Session):
        connection = session.connection()
        self.cursor = connection.connection.cursor()
        self.marker = marker(connection.dialect.name)
        # What the driver raises: statements run on its cursor, so SQLAlchemy does not wrap it.
        self.error: type[Exception] = connection.dialect.loaded_dbapi.Error

    def run(self, statement: str, params: Mapping[str, Any]) -> Any:
        """Run `statement` with `params`; the cursor, to fetch its rows or count them."""
        self.cursor.execute(_written(statement, self.marker, tuple(params)), params)
        return self.cursor

    def each(self, statement: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run `statement` once for each of `rows`, which all name the same parameters."""
        if rows:
            self.cursor.executemany(_written(statement, self.marker, tuple(rows[0])), rows)

    def rows(self, statement: str, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """Run `statement`, whose `{rows}` stands for the columns `rows` name (all the same ones) and
        their VALUES, a few hundred rows at a time; what it returns."""
        returned: list[tuple[Any, ...]] = []
        for start in range(0, len(rows), ROWS_AT_ONCE):
            chunk = rows[start : start + ROWS_AT_ONCE]
            names = tuple(chunk[0])
            listed = ", ".join(f'"{name}"' for name in names)
            values = ", ".join(
                "(" + ", ".join(self.marker.format(f"{name}_{i}") for name in names) + ")" for i in range(len(chunk))
            )
            params = {f"{name}_{i}": row[name] for i, row in enumerate(chunk) for name in names}
            self.cursor.execute(statement.replace("{rows}", f"({listed}) VALUES {values}"), params)
            if self.cursor.description is not None:  # a statement with RETURNING
                returned.extend(self.cursor.fetchall())
        return returned

    def among(self, statement: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run `statement`, whose `{among}` stands for a list of `values`, a few hundred at a time;
        the rows it finds."""
        found: list[tuple[Any, ...]] = []
        for start in range(0, len(values), ROWS_AT_ONCE):
            params = {f"v{i}": value for i, value in enumerate(values[start : start + ROWS_AT_ONCE])}
            listed = ", ".join(self.marker.format(name) for name in params)
            self.cursor.execute(statement.replace("{among}", listed), params)
            found.extend(self.cursor.fetchall())
        return found

    def savepoint(self, name: str = SAVEPOINT) -> AbstractContextManager[None]:
        """The block's statements undone if it raises, the transaction's others kept. Written to the
        driver, as the statements are: this is the same connection's transaction."""
        return savepoint(self.cursor, name, self.error)


@cache
def _written(statement: str, marker: str, names: tuple[str, ...]) -> str:
    return statement.format(**{name: marker.format(name) for name in names})


def apart(session: Session) -> AbstractContextManager[None]:
    """A savepoint for one request's events among others kept in the same transaction."""
    return Sql(session).savepoint(REQUEST_SAVEPOINT)


# An event, and the user who reported it.
Reported = tuple[RunEvent, str]


def receive(
    catalog: Catalog, lake: Lake, events: Sequence[RunEvent], reporter: str, judge: Judge | None = None
) -> list[Received]:
    """Keep the events not kept yet and join them, in a transaction of their own (see `receiving`)."""
    with catalog.session() as session:
        received, entries = receiving(lake, events, reporter, judge)(session)
        ledger.append_many(session, entries)
    return received


def receiving(
    lake: Lake, events: Sequence[RunEvent], reporter: str, judge: Judge | None = None
) -> Callable[[Session], tuple[list[Received], list[ledger.Event]]]:
    """What keeps the events not kept yet and joins them, in the transaction it is given, but for
    those it refuses (see `_refusals`); the joining in a savepoint of its own, so that events it
    fails on are still kept (and said not joined), then, if it failed, each event's in its own.
    With `judge`, each version read under a user it refuses calls for a ledger entry
    (`read.outside-policy`), which it returns for the transaction to append, with what became of
    each event."""

    def work(session: Session) -> tuple[list[Received], list[ledger.Event]]:
        db, where = Sql(session), _Where(lake)
        refused = _refusals(db, where, events)
        reported = [(event, reporter) for event, why in zip(events, refused, strict=True) if why is None]
        stored = _store(db, reported)
        new = _new(reported, stored)
        try:
            with db.savepoint():
                inputs, outside = _join(db, where, new, judge)
            unjoined: list[str | None] = [None] * len(new)
        except TransactionLost:
            raise  # the events are not kept either
        except (*JOIN_ERRORS, db.error):
            inputs, outside, unjoined = _each_alone(db, where, new, judge)
        return _with_refused(events, refused, _received(reported, stored, inputs, unjoined)), [
            outside_entry(found) for found in outside
        ]

    return work


def _each_alone(
    db: Sql, where: _Where, reported: Sequence[Reported], judge: Judge | None
) -> tuple[list[list[dict[str, Any]]], list[Outside], list[str | None]]:
    """Join the events one at a time, each in a savepoint of its own: one that fails to join is
    kept, said not joined and why, and its neighbours are joined all the same."""
    inputs: list[list[dict[str, Any]]] = []
    outside: list[Outside] = []
    unjoined: list[str | None] = []
    for pair in reported:
        try:
            with db.savepoint():
                [said], found = _join(db, where, [pair], judge)
        except TransactionLost:
            raise
        except (*JOIN_ERRORS, db.error) as err:
            inputs.append([])
            unjoined.append(error_summary(err))
            continue
        inputs.append(said)
        outside.extend(found)
        unjoined.append(None)
    return inputs, outside, unjoined


def _with_refused(
    events: Sequence[RunEvent], refused: Sequence[str | None], received: Sequence[Received]
) -> list[Received]:
    """What became of each event, in order: the refused ones said refused, the others as `received` says."""
    taken = iter(received)
    return [
        next(taken) if why is None else Received(event.run_id, event.event_type, False, refused=why)
        for event, why in zip(events, refused, strict=True)
    ]


def together(
    lake: Lake, reports: Sequence[tuple[Sequence[RunEvent], str]], judge: Judge | None = None
) -> Callable[[Session], tuple[list[list[Received]], list[ledger.Event]]]:
    """What keeps and joins the events of several reports (each with the user who reported it) at
    once, as `receiving` does one report's, in a few statements for all of them. It has no savepoint
    of its own: the caller's undoes all of it on NotJoinedTogether (an event that fails to join, a
    statement the database refused), and takes the reports one by one, each answered for itself."""

    def work(session: Session) -> tuple[list[list[Received]], list[ledger.Event]]:
        db, where = Sql(session), _Where(lake)
        every = [(event, reporter) for events, reporter in reports for event in events]
        try:
            refused = _refusals(db, where, [event for event, _ in every])
            reported = [pair for pair, why in zip(every, refused, strict=True) if why is None]
            stored = _store(db, reported)
            new = _new(reported, stored)
            inputs, outside = _join(db, where, new, judge)
        except TransactionLost:
            raise
        except Exception as err:
            # Whatever it is, the caller's savepoint undoes it and each report is taken on its own:
            # one report's fault is its own answer, not its batch's.
            raise NotJoinedTogether(f"the reports could not be kept together: {error_summary(err)}") from err
        received = _received(reported, stored, inputs, [None] * len(new))
        answered = iter(_with_refused([event for event, _ in every], refused, received))
        return [[next(answered) for _ in events] for events, _ in reports], [outside_entry(o) for o in outside]

    return work


def _new(reported: Sequence[Reported], stored: Sequence[bool]) -> list[Reported]:
    return [pair for pair, new in zip(reported, stored, strict=True) if new]


def _received(
    reported: Sequence[Reported],
    stored: Sequence[bool],
    inputs: Sequence[list[dict[str, Any]]],
    unjoined: Sequence[str | None],
) -> list[Received]:
    """What became of each event: the inputs of each new one, or why it was not joined, in order."""
    joined = iter(zip(inputs, unjoined, strict=True))
    said = []
    for (event, _), new in zip(reported, stored, strict=True):
        found, why = next(joined) if new else ([], None)
        said.append(Received(event.run_id, event.event_type, new, found, why))
    return said


def _refusals(db: Sql, where: _Where, events: Sequence[RunEvent]) -> list[str | None]:
    """Why each event is refused, or None: a run id that names another job's run (here or in an
    event before it), or a version facet Custody reads that names no version."""
    jobs = {row[0]: (row[1], row[2]) for row in db.among(RUN_JOBS, sorted({event.run_id for event in events}))}
    refused: list[str | None] = []
    for event in events:
        job = (event.job_namespace, event.job_name)
        owner = jobs.setdefault(event.run_id, job)
        if owner != job:
            refused.append(
                f"run {event.run_id} is a run of job {owner[0]}/{owner[1]}: a run id names one run of one job, "
                f"and {job[0]}/{job[1]} may not report under it"
            )
            continue
        refused.append(next(filter(None, (_unread_version(where, i, d) for i, d in enumerate(event.inputs))), None))
    return refused


def _unread_version(where: _Where, index: int, dataset: Mapping[str, Any]) -> str | None:
    """Why the input's version facet names nothing Custody reads it as, where Custody reads it: a
    version of the asset whose folder it names, or a snapshot of the asset's table."""
    version = _version(dataset)
    if not version:
        return None
    location = where(str(dataset["namespace"]), str(dataset["name"]))
    said = f"inputs[{index}]: the version facet '{shown(version, 40)}' of {shown(str(dataset['name']), 200)}"
    if table_of(location, dataset) is not None:
        if SNAPSHOTS.named(version):
            return None
        return f"{said} names no snapshot: a snapshot id (decimal digits) or a tag {TAG_PREFIX}<N>"
    parts = PurePosixPath(location).parts if location is not None else ()
    if len(parts) == 3 and parts[0] in ZONES and version_number(version) is None:
        return f"{said} names no version: a version is numbered in decimal digits, from 1 to {LARGEST_NUMBER}"
    return None


def _store(db: Sql, reported: Sequence[Reported]) -> list[bool]:
    """Keep each event as received; whether each was new (an event given twice is new once)."""
    now = received_now()
    rows = [
        {
            "run_id": event.run_id,
            "event_type": event.event_type,
            "event_time": event.event_time,
            "received_at": now,
            "reporter": reporter,
            "body": json.dumps(event.body, separators=(",", ":")),
        }
        for event, reporter in reported
    ]
    inserted = {tuple(row) for row in db.rows(STORE, rows)}
    return firsts([(event.run_id, event.event_type, event.event_time) for event, _ in reported], inserted)


def received_now() -> str:
    """Now, as SQLAlchemy writes a time the ORM reads back: UTC, without its zone."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def firsts(keys: Sequence[tuple[Any, ...]], inserted: set[tuple[Any, ...]]) -> list[bool]:
    """For each key, whether its row was inserted by this occurrence: the first of those inserted."""
    seen: set[tuple[Any, ...]] = set()
    found = []
    for key in keys:
        found.append(key in inserted and key not in seen)
        seen.add(key)
    return found


@dataclass(frozen=True)
class _Use:
    """A dataset an event's run read or wrote, at a version; for an input, what it is to Custody."""

    run_id: str
    direction: str
    dataset: Mapping[str, Any]
    version: str
    resolved: Resolved = Resolved()

    @cached_property
    def key(self) -> str:
        return digest(self.dataset["namespace"], self.dataset["name"], self.version)


def _join(
    db: Sql, where: _Where, reported: Sequence[Reported], judge: Judge | None
) -> tuple[list[list[dict[str, Any]]], list[Outside]]:
    """Join the events, in a few statements for all of them: each run, what it read (each version
    read for the first time held to `judge`), what it wrote and the column lineage it gives for
    that. What each event's inputs are, and the reads `judge` refused. `where` is the lake's, and
    what it found of names before (the refusals looked at the same ones)."""
    users = _runs(db, reported)
    uses: list[list[_Use]] = []
    for (event, _), reads in zip(reported, _resolve(db, where.lake, where, [e for e, _ in reported]), strict=True):
        read = [
            _Use(event.run_id, INPUT, dataset, _read_version(dataset, resolved), resolved)
            for dataset, resolved in reads
        ]
        wrote = [_Use(event.run_id, OUTPUT, dataset, _version(dataset)) for dataset in event.outputs]
        uses.append(read + wrote)
    flat = [use for used in uses for use in used]
    ids = _dataset_ids(db, where, flat)
    first_uses = iter(_record_uses(db, flat, ids))
    inputs: list[list[dict[str, Any]]] = []
    outside: list[Outside] = []
    for (event, reporter), user, used in zip(reported, users, uses, strict=True):
        said = []
        for use in used:
            first = next(first_uses)
            if use.direction == OUTPUT:
                columns.record(db, event.run_id, ids[use.key], use.dataset)
                continue
            asset = None if use.resolved.waiting else use.resolved.asset
            why = judge(user, asset) if first and judge is not None and asset is not None else None
            if why is not None:
                job = f"{event.job_namespace}/{event.job_name}"
                outside.append(Outside(event.run_id, job, event.producer, use.resolved, user, why, reporter))
            said.append(_said(use.dataset, use.resolved))
        inputs.append(said)
    return inputs, outside


def _read_version(dataset: Mapping[str, Any], resolved: Resolved) -> str:
    return str(resolved.number) if resolved.number is not None else _version(dataset)


class _Where:
    """Where in the lake each dataset's name is, asked once for a name however often it is met."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self._found: dict[tuple[str, str], str | None] = {}

    def __call__(self, namespace: str, name: str) -> str | None:
        key = (namespace, name)
        if key not in self._found:
            uri = _uri(namespace, name)
            self._found[key] = self.lake.location_of(uri) if uri is not None else None
        return self._found[key]


@dataclass(frozen=True)
class _Run:
    state: str
    state_time: str
    started_at: str | None
    user: str | None
    error: str | None = None
    parent_run_id: str | None = None
    parent_job_namespace: str | None = None
    parent_job_name: str | None = None

    def told(self, event: RunEvent) -> _Run:
        """The run as it is once `event` is known too: its state if the event says more of it, its
        start, and what the first events to say them say of its user, error and parent."""
        state, state_time = self.state, self.state_time
        if _later(event, state, state_time):
            state, state_time = event.event_type, event.event_time
        parent = (self.parent_run_id, self.parent_job_namespace, self.parent_job_name)
        return _Run(
            state,
            state_time,
            self.started_at or (event.event_time if event.event_type == "START" else None),
            self.user or reported_user(event),
            self.error or error_message(event.run_facets),
            *(parent if self.parent_run_id else parent_of(event.run_facets, event.run_id)),
        )


def _runs(db: Sql, reported: Sequence[Reported]) -> list[str | None]:
    """Record each event's run, or what the event changes of it, in the events' order; the user
    each event's run ran as, as far as the events up to it say."""
    known = {row[0]: _Run(*row[1:]) for row in db.among(RUNS, sorted({event.run_id for event, _ in reported}))}
    touched = set(known)
    new: dict[str, dict[str, Any]] = {}
    users = []
    for event, reporter in reported:
        run = known.get(event.run_id)
        if run is None:
            run = _Run(event.event_type, event.event_time, None, None).told(event)
            new[event.run_id] = {
                "run_id": event.run_id,
                "job_namespace": event.job_namespace,
                "job_name": event.job_name,
                "producer": event.producer,
                "reporter": reporter,
                "job_ident": ident(event.job_namespace, event.job_name),
            }
        else:
            run = run.told(event)
        known[event.run_id] = run
        users.append(run.user)
    db.rows(NEW_RUNS, [{**row, **_run_values(known[run_id])} for run_id, row in new.items()])
    db.each(RUN_NOW, [{**_run_values(known[run_id]), "run_id": run_id} for run_id in sorted(touched)])
    return users


def _run_values(run: _Run) -> dict[str, Any]:
    return dict(run.__dict__)


def _dataset_ids(db: Sql, where: _Where, uses: Sequence[_Use]) -> dict[str, int]:
    """Each dataset's id by its key, those met for the first time recorded. Another transaction
    recording the same one at once makes this one's insert do nothing, and its row is read once
    that one has committed."""
    rows: dict[str, dict[str, Any]] = {}
    for use in uses:
        if use.key not in rows:
            namespace, name = use.dataset["namespace"], use.dataset["name"]
            location = where(namespace, name)
            rows[use.key] = {
                "namespace": namespace,
                "name": name,
                "version": use.version,
                "ident": ident(namespace, name),
                "key": use.key,
                "location": location if location is not None and len(location) <= LONGEST_LOCATION else None,
            }
    ids = dict(db.among(DATASETS, sorted(rows)))
    if missing := [row for key, row in rows.items() if key not in ids]:
        ids.update(db.rows(NEW_DATASETS, missing))
    if raced := [key for key in rows if key not in ids]:
        ids.update(db.among(DATASETS, raced))
    for key, row in rows.items():
        if key not in ids:
            raise CustodyError(f"the dataset {row['namespace']}/{row['name']} was neither found nor recorded")
    return {key: int(found) for key, found in ids.items()}


def _record_uses(db: Sql, uses: Sequence[_Use], ids: Mapping[str, int]) -> list[bool]:
    """Record that each run read or wrote each dataset; for each, whether this had not been recorded yet."""
    rows = [
        {
            "run_id": use.run_id,
            "direction": use.direction,
            "dataset_id": ids[use.key],
            "version_id": use.resolved.version_id,
            "awaits_asset": use.resolved.asset if use.resolved.waiting else None,
            "awaits_number": use.resolved.number if use.resolved.waiting else None,
        }
        for use in uses
    ]
    inserted = {(run_id, direction, int(dataset_id)) for run_id, direction, dataset_id in db.rows(IO, rows)}
    return firsts([(row["run_id"], row["direction"], row["dataset_id"]) for row in rows], inserted)


def _resolve(
    db: Sql, lake: Lake, where: _Where, events: Sequence[RunEvent]
) -> list[list[tuple[Mapping[str, Any], Resolved]]]:
    """What each event's input datasets are to Custody, each read once for every location it was
    read at: the version of an asset's table it read (see governance.foreign.tables); else the
    locations its `subset` facet names (Spark's listener names a folder of `key=value` folders,
    such as an asset's versions, by the folder, and the ones it read there), else its name. The
    versions at those locations, or holding them, are looked up all at once."""
    asked: list[list[tuple[Mapping[str, Any], Resolved | str]]] = []
    for event in events:
        reads: list[tuple[Mapping[str, Any], Resolved | str]] = []
        for dataset in event.inputs:
            namespace, name = str(dataset["namespace"]), str(dataset["name"])
            key = table_of(where(namespace, name), dataset)
            if key is not None:
                reads.append((dataset, _snapshot_read(db, lake, key, _version(dataset))))
                continue
            for at in _locations(dataset) or [name]:
                location = where(namespace, at)
                reads.append((dataset, Resolved() if location is None else location))
        asked.append(reads)
    paths = sorted({path for reads in asked for _, read in reads if isinstance(read, str) for path in _holding(read)})
    versions = {row[0]: row[1:] for row in db.among(VERSIONS_AT, paths)}
    return [
        [
            (dataset, found)
            for dataset, read in reads
            for found in ([read] if isinstance(read, Resolved) else _resolved(db, versions, read, _version(dataset)))
        ]
        for reads in asked
    ]


def _holding(location: str) -> list[str]:
    """The location (as `Lake.location_of` gives it: normalized, relative), then each folder
    holding it, the nearest first. Worked on as text, as `location_of` is."""
    holding = [location]
    while "/" in location:
        location = location.rsplit("/", 1)[0]
        holding.append(location)
    return holding


def _resolved(db: Sql, versions: Mapping[str, tuple[Any, ...]], location: str, version: str) -> list[Resolved]:
    """The version whose folder is `location` or holds it, else the version `version` of the asset
    whose folder it is, else the version either names if its asset has none so numbered yet (the
    read waits for it), else, with no version named, every version that folder holds: a read of
    the whole folder (Spark's listener names it so when a job reads it and filters its `v=N`
    partitions, or none) is a read of each."""
    found = next((versions[path] for path in _holding(location) if path in versions), None)
    found = found or _asset_at(db, location, version)
    if found is not None:
        version_id, asset, number = found
        return [Resolved(int(version_id), str(asset), int(number))]
    if (awaited := _awaited(db, location, version)) is not None:
        return [awaited]
    held = _held_at(db, location) if not version else []
    if not held:
        return [Resolved(problem=f"in the lake at {location}, where the catalog has no version")]
    return [Resolved(int(version_id), str(asset), int(number)) for version_id, asset, number in held]


def outside_entry(found: Outside) -> ledger.Event:
    """The ledger entry of a version's read under a user who may not read it: Custody cannot stop
    another tool's direct read of the lake, but it does not let one pass unseen."""
    return ledger.Event(
        actor=ledger_actor(found.user) if found.user else "unknown",
        action=OUTSIDE_POLICY,
        asset=found.read.asset,
        version=found.read.number,
        run_id=found.run_id,
        assurance=Assurance.ASSERTED if found.user else Assurance.NONE,
        details={
            "result": "outside policy",
            "reason": found.reason,
            "job": found.job,
            "producer": found.producer,
            "reported_by": found.reporter,
            "channel": FOREIGN_CHANNEL,
        },
    )


def _said(dataset: Mapping[str, Any], resolved: Resolved) -> dict[str, Any]:
    said: dict[str, Any] = {"namespace": dataset["namespace"], "name": dataset["name"]}
    if resolved.waiting:
        said["waiting for"] = resolved.ref
    elif resolved.ref is not None:
        said["version"] = resolved.ref
    if resolved.problem is not None:
        said["problem"] = resolved.problem
    return said


def _later(event: RunEvent, state: str, state_time: str) -> bool:
    """Whether the event says more of the run's state than the one it is in: an end always does,
    over a start or a progress report; otherwise the later one."""
    if (event.event_type in ENDED) != (state in ENDED):
        return event.event_type in ENDED
    return moment(event.event_time) >= moment(state_time)


def reported_user(event: RunEvent) -> str | None:
    """The user the run's facets say it ran as: Spark's application user, Airflow's task (else
    DAG) owner, or a `user` tag of the run; None when they say none."""
    facets = event.run_facets
    spark = facets.get("spark_applicationDetails") or {}
    airflow = facets.get("airflow") or {}
    tags = (facets.get("tags") or {}).get("tags") or ()
    found = [
        spark.get("userName"),
        (airflow.get("task") or {}).get("owner"),
        (airflow.get("dag") or {}).get("owner"),
        *(tag.get("value") for tag in tags if isinstance(tag, Mapping) and tag.get("key") == "user"),
    ]
    return next((str(user) for user in found if isinstance(user, str) and user.strip()), None)


def error_message(facets: Mapping[str, Any]) -> str | None:
    """The error a failed run's `errorMessage` facet gives, cut to LONGEST_ERROR characters."""
    facet = facets.get("errorMessage") or {}
    message = facet.get("message") if isinstance(facet, Mapping) else None
    return message[:LONGEST_ERROR] if isinstance(message, str) and message.strip() else None


def parent_of(facets: Mapping[str, Any], run_id: str) -> tuple[str | None, str | None, str | None]:
    """The parent run of run `run_id` its `parent` facet names (an Airflow DAG run for its task's
    run, a Spark application for its action's), with the parent's job namespace and name; Nones
    if none."""
    facet = facets.get("parent") or {}
    run = facet.get("run") if isinstance(facet, Mapping) else None
    job = facet.get("job") if isinstance(facet, Mapping) else None
    parent = run.get("runId") if isinstance(run, Mapping) else None
    if not isinstance(parent, str) or not UUID.fullmatch(parent.lower()) or parent.lower() == run_id:
        return None, None, None
    # Held here as the event's own names are: a facet Custody holds no schema of was not.
    namespace, name = (job.get("namespace"), job.get("name")) if isinstance(job, Mapping) else (None, None)
    if not all(
        isinstance(said, str) and 0 < len(said) <= MAX_NAME and not CONTROL.search(said) for said in (namespace, name)
    ):
        return None, None, None
    return parent.lower(), namespace, name


def _version(dataset: Mapping[str, Any]) -> str:
    facet = (dataset.get("facets") or {}).get("version") or {}
    version = facet.get("datasetVersion") if isinstance(facet, Mapping) else None
    return str(version) if version is not None else ""


def _snapshot_read(db: Sql, lake: Lake, key: AssetKey, version: str) -> Resolved:
    if not version:
        return Resolved(problem=f"the table of {key}, with no snapshot named in its version facet")
    number = SNAPSHOTS.number(lake, key, version)
    found = db.run(VERSION_NUMBERED, {"asset": str(key), "number": number}).fetchone() if number else None
    if found is None:
        return Resolved(problem=f"the table of {key} at snapshot {version}, which is no version of it")
    version_id, asset, number = found
    return Resolved(int(version_id), str(asset), int(number))


def _locations(dataset: Mapping[str, Any]) -> list[str]:
    subset = (dataset.get("inputFacets") or {}).get("subset") or {}
    condition = subset.get("inputCondition") if isinstance(subset, Mapping) else None
    if not isinstance(condition, Mapping) or condition.get("type") != "location":
        return []
    return [str(location) for location in condition.get("locations") or () if isinstance(location, str)]


def _uri(namespace: str, name: str) -> str | None:
    """The location OpenLineage's naming gives: the local file system's namespace (`file`, or a
    `file://` URI naming this host or none) and a path, or an object store's `s3://bucket` and a
    key. A name that is a whole URI already (Custody's own events on a lake in an object store)
    stands alone. Any other namespace (another host's files, HDFS, another store) is another
    datasource than the lake: None."""
    if "://" in name:
        return name if _this_host(name) else None
    if namespace.startswith(("s3://", "s3a://", "s3n://")):
        return f"{namespace.rstrip('/')}/{name.lstrip('/')}"
    if namespace == "file" or (namespace.startswith("file://") and _this_host(namespace)):
        return name
    return None


def _this_host(uri: str) -> bool:
    """Whether a URI names no other host's files: any but a `file:` URI naming another host."""
    parts = urlsplit(uri)
    return parts.scheme != "file" or parts.netloc.lower() in _local_hosts()


@cache
def _local_hosts() -> frozenset[str]:
    return frozenset({"", "localhost", "127.0.0.1", socket.gethostname().lower(), socket.getfqdn().lower()})


def _held_at(db: Sql, location: str) -> list[tuple[Any, ...]]:
    """The committed versions in the asset's folder that `location` (zone/domain/name) is."""
    parts = PurePosixPath(location).parts
    if len(parts) != 3 or parts[0] not in ZONES:
        return []
    asked = {"asset": f"{parts[1]}/{parts[2]}", "zone": parts[0], "status": VersionStatus.COMMITTED.value}
    return list(db.run(VERSIONS_HELD, asked).fetchall())


def _awaited(db: Sql, location: str, version: str) -> Resolved | None:
    """The version not committed yet that `location` names: the asset's folder (zone/domain/name)
    with `version` given, or a version's folder (…/v=N) or a file in it; None unless the catalog
    has that asset in that zone."""
    parts = PurePosixPath(location).parts
    if len(parts) < 3 or parts[0] not in ZONES:
        return None
    if len(parts) == 3:
        number = version_number(version)
    else:
        numbered = VERSION_DIR.fullmatch(parts[3])
        number = version_number(numbered.group(1)) if numbered else None
    asset = f"{parts[1]}/{parts[2]}"
    if number is None or db.run(ASSET_IN_ZONE, {"asset": asset, "zone": parts[0]}).fetchone() is None:
        return None
    return Resolved(asset=asset, number=number)


def _asset_at(db: Sql, location: str, version: str) -> Any:
    """The version `version` of the asset whose folder (zone/domain/name) is `location`."""
    parts, number = PurePosixPath(location).parts, version_number(version)
    if len(parts) != 3 or parts[0] not in ZONES or number is None:
        return None
    asked = {"asset": f"{parts[1]}/{parts[2]}", "number": number, "zone": parts[0]}
    return db.run(VERSION_OF, asked).fetchone()
