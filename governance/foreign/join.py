"""Run events kept as received, then joined: each run's job, state and reported user; the datasets
it read and wrote; and, for an input that is a Custody version, that version.

An input is a Custody version when its name is a version's location in the lake (the folder, or a
file in it: `file` /lake/landing/sales/clients/v=3, or `s3://bucket` prefix/…), or the asset's
folder as Custody's own events name it with the version in its `version` facet, or the asset's
Iceberg table at the version's snapshot (governance.foreign.tables). A run that read a
version under a reported user who holds no role on its asset is recorded (`read.outside-policy`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from governance import ledger
from governance.access.guard import ledger_actor
from governance.catalog import Catalog
from governance.catalog.jsonrows import marker
from governance.errors import CustodyError, TransactionLost, error_summary
from governance.foreign import columns
from governance.foreign.datasets import INPUT, OUTPUT, digest, ident
from governance.foreign.events import RunEvent
from governance.foreign.tables import SNAPSHOTS, table_of
from governance.runs import Assurance
from governance.zones import AssetKey, Lake, Zone

# A run's state follows its latest event; one that ended stays ended whatever comes after.
ENDED = ("COMPLETE", "FAIL", "ABORT")
ZONES = frozenset(zone.value for zone in Zone)
OUTSIDE_POLICY = "read.outside-policy"
# How a foreign run's report reached Custody, as the ledger names channels.
FOREIGN_CHANNEL = "openlineage"
# Whether a reported user may read an asset: None if so, else why not.
Judge = Callable[[str | None, str], str | None]

STORE = (
    "INSERT INTO foreign_event (run_id, event_type, event_time, received_at, reporter, body) "
    "VALUES ({run_id}, {event_type}, {event_time}, {received_at}, {reporter}, {body}) ON CONFLICT DO NOTHING"
)
RUN = 'SELECT state, state_time, started_at, "user" FROM foreign_run WHERE run_id = {run_id}'
NEW_RUN = (
    'INSERT INTO foreign_run (run_id, job_namespace, job_name, producer, state, state_time, started_at, "user", reporter) '
    "VALUES ({run_id}, {job_namespace}, {job_name}, {producer}, {state}, {state_time}, {started_at}, {user}, {reporter})"
)
RUN_NOW = (
    'UPDATE foreign_run SET state = {state}, state_time = {state_time}, started_at = {started_at}, "user" = {user} '
    "WHERE run_id = {run_id}"
)
DATASET = "SELECT id FROM foreign_dataset WHERE key = {key}"
NEW_DATASET = (
    "INSERT INTO foreign_dataset (namespace, name, version, ident, key, location) "
    "VALUES ({namespace}, {name}, {version}, {ident}, {key}, {location}) ON CONFLICT DO NOTHING RETURNING id"
)
# The longest location kept: an index entry must stay small on every backend.
LONGEST_LOCATION = 1_000
IO = (
    "INSERT INTO foreign_io (run_id, direction, dataset_id, version_id) "
    "VALUES ({run_id}, {direction}, {dataset_id}, {version_id}) ON CONFLICT DO NOTHING"
)
VERSION_AT = "SELECT id, asset_key, number FROM version WHERE path IN ({paths}) ORDER BY length(path) DESC LIMIT 1"
VERSION_OF = (
    "SELECT id, asset_key, number FROM version WHERE asset_key = {asset} AND number = {number} AND zone = {zone}"
)
VERSION_NUMBERED = "SELECT id, asset_key, number FROM version WHERE asset_key = {asset} AND number = {number}"
# The joining's own savepoint: a transaction may keep the events of several requests, one after the other.
SAVEPOINT = "custody_joining"
REQUEST_SAVEPOINT = "custody_request"
# Python's datetime takes at most microseconds; Java's clients may send nanoseconds.
FRACTION = re.compile(r"(\.\d{6})\d+")


@dataclass(frozen=True)
class Resolved:
    """What an input dataset is to Custody: a version (`ref`), or why it is none (`problem`), or
    neither: a dataset outside the lake."""

    version_id: int | None = None
    asset: str | None = None
    number: int | None = None
    problem: str | None = None

    @property
    def ref(self) -> str | None:
        return None if self.asset is None else f"{self.asset}@{self.number}"


@dataclass(frozen=True)
class Outside:
    """A version a run read under a user who may not read it, and why not."""

    event: RunEvent
    read: Resolved
    user: str | None
    reason: str


@dataclass(frozen=True)
class Received:
    """What became of one event: stored, or already stored; what each input resolved to; and why
    it could not be joined, if it could not."""

    run_id: str
    event_type: str
    stored: bool
    inputs: list[dict[str, Any]] = field(default_factory=list)
    unjoined: str | None = None

    def to_dict(self) -> dict[str, Any]:
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

    @contextmanager
    def savepoint(self, name: str = SAVEPOINT) -> Iterator[None]:
        """The block's statements undone if it raises, the transaction's others kept. Written to the
        driver, as the statements are: this is the same connection's transaction."""
        self.cursor.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException as failed:
            try:
                self.cursor.execute(f"ROLLBACK TO SAVEPOINT {name}")
                self.cursor.execute(f"RELEASE SAVEPOINT {name}")
            except self.error as lost:
                raise TransactionLost(f"the transaction ended on a database error: {error_summary(failed)}") from lost
            raise
        self.cursor.execute(f"RELEASE SAVEPOINT {name}")


@cache
def _written(statement: str, marker: str, names: tuple[str, ...]) -> str:
    return statement.format(**{name: marker.format(name) for name in names})


def apart(session: Session) -> AbstractContextManager[None]:
    """A savepoint for one request's events among others kept in the same transaction."""
    return Sql(session).savepoint(REQUEST_SAVEPOINT)


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
    """What keeps the events not kept yet and joins them, in the transaction it is given; the
    joining in a savepoint of its own, so that events it fails on are still kept (and said not
    joined). With `judge`, each version read under a user it refuses calls for a ledger entry
    (`read.outside-policy`), which it returns for the transaction to append, with what became of
    each event."""

    def work(session: Session) -> tuple[list[Received], list[ledger.Event]]:
        db = Sql(session)
        stored = [_store(db, event, reporter) for event in events]
        outside: list[Outside] = []
        try:
            with db.savepoint():
                received = [
                    Received(
                        event.run_id,
                        event.event_type,
                        new,
                        _join(db, lake, event, reporter, judge, outside) if new else [],
                    )
                    for event, new in zip(events, stored, strict=True)
                ]
        except TransactionLost:
            raise  # the events are not kept either
        except (SQLAlchemyError, db.error, CustodyError, ValueError) as err:
            why = error_summary(err)
            unjoined = [
                Received(event.run_id, event.event_type, new, unjoined=why if new else None)
                for event, new in zip(events, stored, strict=True)
            ]
            return unjoined, []
        return received, [_outside_entry(found, reporter) for found in outside]

    return work


def _store(db: Sql, event: RunEvent, reporter: str) -> bool:
    row = {
        "run_id": event.run_id,
        "event_type": event.event_type,
        "event_time": event.event_time,
        # As SQLAlchemy writes a time the ORM reads back: UTC, without its zone.
        "received_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f"),
        "reporter": reporter,
        "body": json.dumps(event.body, separators=(",", ":")),
    }
    return bool(db.run(STORE, row).rowcount)


def _join(
    db: Sql, lake: Lake, event: RunEvent, reporter: str, judge: Judge | None, outside: list[Outside]
) -> list[dict[str, Any]]:
    """Join the event: its run, what it read (each version read for the first time held to
    `judge`, those it refuses added to `outside`), what it wrote and the column lineage it gives
    for that. What each input is."""
    user = _run(db, event, reporter)
    inputs = []
    for dataset in event.inputs:
        for resolved in resolve(db, lake, dataset):
            version = str(resolved.number) if resolved.number is not None else _version(dataset)
            _, first = _io(db, lake, event.run_id, INPUT, dataset, version, resolved.version_id)
            why = judge(user, resolved.asset) if first and judge is not None and resolved.asset is not None else None
            if why is not None:
                outside.append(Outside(event, resolved, user, why))
            inputs.append(_said(dataset, resolved))
    for dataset in event.outputs:
        dataset_id, _ = _io(db, lake, event.run_id, OUTPUT, dataset, _version(dataset), None)
        columns.record(db, event.run_id, dataset_id, dataset)
    return inputs


def _outside_entry(found: Outside, reporter: str) -> ledger.Event:
    """The ledger entry of a version's read under a user who may not read it: Custody cannot stop
    another tool's direct read of the lake, but it does not let one pass unseen."""
    event = found.event
    return ledger.Event(
        actor=ledger_actor(found.user) if found.user else "unknown",
        action=OUTSIDE_POLICY,
        asset=found.read.asset,
        version=found.read.number,
        run_id=event.run_id,
        assurance=Assurance.ASSERTED if found.user else Assurance.NONE,
        details={
            "result": "outside policy",
            "reason": found.reason,
            "job": f"{event.job_namespace}/{event.job_name}",
            "producer": event.producer,
            "reported_by": reporter,
            "channel": FOREIGN_CHANNEL,
        },
    )


def _said(dataset: Mapping[str, Any], resolved: Resolved) -> dict[str, Any]:
    said: dict[str, Any] = {"namespace": dataset["namespace"], "name": dataset["name"]}
    if resolved.ref is not None:
        said["version"] = resolved.ref
    if resolved.problem is not None:
        said["problem"] = resolved.problem
    return said


def _run(db: Sql, event: RunEvent, reporter: str) -> str | None:
    """Record the run, or what the event changes of it; the user it ran as, if any event said."""
    found = db.run(RUN, {"run_id": event.run_id}).fetchone()
    started = event.event_time if event.event_type == "START" else None
    if found is None:
        user = reported_user(event)
        db.run(
            NEW_RUN,
            {
                "run_id": event.run_id,
                "job_namespace": event.job_namespace,
                "job_name": event.job_name,
                "producer": event.producer,
                "state": event.event_type,
                "state_time": event.event_time,
                "started_at": started,
                "user": user,
                "reporter": reporter,
            },
        )
        return user
    state, state_time, started_at, user = found
    if _later(event, state, state_time):
        state, state_time = event.event_type, event.event_time
    user = user or reported_user(event)
    values = {"state": state, "state_time": state_time, "started_at": started or started_at, "user": user}
    db.run(RUN_NOW, {**values, "run_id": event.run_id})
    return user


def _later(event: RunEvent, state: str, state_time: str) -> bool:
    """Whether the event says more of the run's state than the one it is in: an end always does,
    over a start or a progress report; otherwise the later one."""
    if (event.event_type in ENDED) != (state in ENDED):
        return event.event_type in ENDED
    return _moment(event.event_time) >= _moment(state_time)


def _moment(value: str) -> datetime:
    moment = datetime.fromisoformat(FRACTION.sub(r"\1", value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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


def _io(
    db: Sql,
    lake: Lake,
    run_id: str,
    direction: str,
    dataset: Mapping[str, Any],
    version: str,
    version_id: int | None,
) -> tuple[int, bool]:
    """Record that the run read or wrote the dataset at `version`: the dataset's id, and whether
    this had not been recorded yet."""
    namespace, name = dataset["namespace"], dataset["name"]
    location = lake.location_of(_uri(namespace, name))
    kept = location if location is not None and len(location) <= LONGEST_LOCATION else None
    dataset_id = _dataset_id(db, namespace, name, version, kept)
    row = {"run_id": run_id, "direction": direction, "dataset_id": dataset_id, "version_id": version_id}
    return dataset_id, bool(db.run(IO, row).rowcount)


def _version(dataset: Mapping[str, Any]) -> str:
    facet = (dataset.get("facets") or {}).get("version") or {}
    version = facet.get("datasetVersion") if isinstance(facet, Mapping) else None
    return str(version) if version is not None else ""


def _dataset_id(db: Sql, namespace: str, name: str, version: str, location: str | None) -> int:
    """The dataset's id, recorded first if it is new. Another transaction recording the same one
    at once makes this one's insert do nothing, and its row is read once that one has committed."""
    key = digest(namespace, name, version)
    found = _first(db.run(DATASET, {"key": key}))
    if found is None:
        row = {
            "namespace": namespace,
            "name": name,
            "version": version,
            "ident": ident(namespace, name),
            "key": key,
            "location": location,
        }
        found = _first(db.run(NEW_DATASET, row))
    if found is None:
        found = _first(db.run(DATASET, {"key": key}))
    if found is None:
        raise CustodyError(f"the dataset {namespace}/{name} was neither found nor recorded")
    return int(found)


def _first(cursor: Any) -> Any:
    """The first column of the cursor's first row, or None without one."""
    row = cursor.fetchone()
    return None if row is None else row[0]


def resolve(db: Sql, lake: Lake, dataset: Mapping[str, Any]) -> list[Resolved]:
    """What an input dataset is to Custody: the version of an asset's table it read (see
    governance.foreign.tables); else for each location it was read at: the locations its `subset`
    facet names (Spark's listener names a folder of `key=value` folders, such as an asset's
    versions, by the folder, and the ones it read there), else its name."""
    namespace, name = str(dataset["namespace"]), str(dataset["name"])
    key = table_of(lake.location_of(_uri(namespace, name)), dataset)
    if key is not None:
        return [_snapshot_read(db, lake, key, _version(dataset))]
    return [_resolved(db, lake, namespace, at, _version(dataset)) for at in _locations(dataset) or [name]]


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


def _resolved(db: Sql, lake: Lake, namespace: str, name: str, version: str) -> Resolved:
    location = lake.location_of(_uri(namespace, name))
    if location is None:
        return Resolved()
    found = _version_at(db, location) or _asset_at(db, location, version)
    if found is None:
        return Resolved(problem=f"in the lake at {location}, where the catalog has no version")
    version_id, asset, number = found
    return Resolved(int(version_id), str(asset), int(number))


def _uri(namespace: str, name: str) -> str:
    """The location OpenLineage's naming gives: `file` and a path, or an object store's
    `s3://bucket` and a key. A name that is a whole URI already (Custody's own events on a lake in
    an object store) stands alone."""
    if "://" in name:
        return name
    if namespace.startswith(("s3://", "s3a://", "s3n://")):
        return f"{namespace.rstrip('/')}/{name.lstrip('/')}"
    return name


def _version_at(db: Sql, location: str) -> Any:
    """The version whose folder is `location` or holds it."""
    path = PurePosixPath(location)
    candidates = [path.as_posix(), *(parent.as_posix() for parent in path.parents if parent.as_posix() != ".")]
    named = {f"path{i}": candidate for i, candidate in enumerate(candidates)}
    return db.run(VERSION_AT.replace("{paths}", ", ".join(f"{{{name}}}" for name in named)), named).fetchone()


def _asset_at(db: Sql, location: str, version: str) -> Any:
    """The version `version` of the asset whose folder (zone/domain/name) is `location`."""
    parts = PurePosixPath(location).parts
    if len(parts) != 3 or parts[0] not in ZONES or not version.isdigit():
        return None
    asked = {"asset": f"{parts[1]}/{parts[2]}", "number": int(version), "zone": parts[0]}
    return db.run(VERSION_OF, asked).fetchone()
