"""Run events kept as received, then joined: each run's job, state and reported user; the datasets
it read and wrote; and, for an input that is a Custody version, that version.

An input is a Custody version when its name is a version's location in the lake (the folder, or a
file in it: `file` /lake/landing/sales/clients/v=3, or `s3://bucket` prefix/…), or the asset's
folder as Custody's own events name it with the version in its `version` facet."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from governance.catalog import Catalog
from governance.catalog.models import ForeignDataset, ForeignEvent, ForeignIO, ForeignRun, VersionRow
from governance.foreign.events import RunEvent
from governance.zones import Lake, Zone

INPUT, OUTPUT = "input", "output"
# A run's state follows its latest event; one that ended stays ended whatever comes after.
ENDED = ("COMPLETE", "FAIL", "ABORT")
ZONES = frozenset(zone.value for zone in Zone)


@dataclass(frozen=True)
class Resolved:
    """What an input dataset is to Custody: a version (`ref`), or why it is none (`problem`), or
    neither: a dataset outside the lake."""

    version_id: int | None = None
    ref: str | None = None
    problem: str | None = None


@dataclass(frozen=True)
class Received:
    """What became of one event: stored, or already stored; and what each input resolved to."""

    run_id: str
    event_type: str
    stored: bool
    inputs: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "eventType": self.event_type,
            "received": "stored" if self.stored else "already stored",
            "inputs": self.inputs,
        }


def receive(catalog: Catalog, lake: Lake, events: Sequence[RunEvent], reporter: str) -> list[Received]:
    """Keep the events not kept yet, in one transaction, then join those in another: an event whose
    joining fails is still kept."""
    with catalog.session() as session:
        stored = [_store(session, event, reporter) for event in events]
    with catalog.session() as session:
        return [
            Received(event.run_id, event.event_type, new, _join(session, lake, event, reporter) if new else [])
            for event, new in zip(events, stored, strict=True)
        ]


def _store(session: Session, event: RunEvent, reporter: str) -> bool:
    row = {
        "run_id": event.run_id,
        "event_type": event.event_type,
        "event_time": event.event_time,
        "received_at": datetime.now(UTC),
        "reporter": reporter,
        "body": json.dumps(event.body, separators=(",", ":")),
    }
    return _insert_new(session, ForeignEvent.__table__, row)  # type: ignore[attr-defined]


def _join(session: Session, lake: Lake, event: RunEvent, reporter: str) -> list[dict[str, Any]]:
    _run(session, event, reporter)
    inputs = []
    for dataset in event.inputs:
        resolved = resolve(session, lake, dataset)
        _io(session, event.run_id, INPUT, dataset, resolved.version_id)
        inputs.append(_said(dataset, resolved))
    for dataset in event.outputs:
        _io(session, event.run_id, OUTPUT, dataset, None)
    return inputs


def _said(dataset: Mapping[str, Any], resolved: Resolved) -> dict[str, Any]:
    said: dict[str, Any] = {"namespace": dataset["namespace"], "name": dataset["name"]}
    if resolved.ref is not None:
        said["version"] = resolved.ref
    if resolved.problem is not None:
        said["problem"] = resolved.problem
    return said


def _run(session: Session, event: RunEvent, reporter: str) -> None:
    run = session.get(ForeignRun, event.run_id)
    user = reported_user(event)
    if run is None:
        run = ForeignRun(
            run_id=event.run_id,
            job_namespace=event.job_namespace,
            job_name=event.job_name,
            producer=event.producer,
            state=event.event_type,
            state_time=event.event_time,
            reporter=reporter,
        )
    elif _later(event, run):
        run.state, run.state_time = event.event_type, event.event_time
    if event.event_type == "START":
        run.started_at = event.event_time
    run.user = run.user or user
    session.add(run)


def _later(event: RunEvent, run: ForeignRun) -> bool:
    """Whether the event says more of the run's state than the one it is in: an end always does,
    over a start or a progress report; otherwise the later one."""
    if (event.event_type in ENDED) != (run.state in ENDED):
        return event.event_type in ENDED
    return _moment(event.event_time) >= _moment(run.state_time)


def _moment(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
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


def _io(session: Session, run_id: str, direction: str, dataset: Mapping[str, Any], version_id: int | None) -> None:
    dataset_id = _dataset_id(session, dataset["namespace"], dataset["name"], _version(dataset))
    row = {"run_id": run_id, "direction": direction, "dataset_id": dataset_id, "version_id": version_id}
    _insert_new(session, ForeignIO.__table__, row)  # type: ignore[attr-defined]


def _version(dataset: Mapping[str, Any]) -> str:
    facet = (dataset.get("facets") or {}).get("version") or {}
    version = facet.get("datasetVersion") if isinstance(facet, Mapping) else None
    return str(version) if version is not None else ""


def ident(namespace: str, name: str) -> str:
    """A dataset's namespace and name as one short digest, whatever their length."""
    return _digest(namespace, name)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _dataset_id(session: Session, namespace: str, name: str, version: str) -> int:
    key = _digest(namespace, name, version)
    row = {"namespace": namespace, "name": name, "version": version, "ident": ident(namespace, name), "key": key}
    _insert_new(session, ForeignDataset.__table__, row)  # type: ignore[attr-defined]
    found = session.exec(select(ForeignDataset.id).where(col(ForeignDataset.key) == key)).one()
    return int(found)  # type: ignore[arg-type]  # the primary key of a row read back


def resolve(session: Session, lake: Lake, dataset: Mapping[str, Any]) -> Resolved:
    """The Custody version an input dataset is, if it is one."""
    namespace, name = str(dataset["namespace"]), str(dataset["name"])
    location = lake.location_of(_uri(namespace, name))
    if location is None:
        return Resolved()
    found = _version_at(session, location)
    if found is None:
        found = _asset_at(session, location, _version(dataset))
    if found is None:
        return Resolved(problem=f"in the lake at {location}, where the catalog has no version")
    return Resolved(found.stored_id, found.ref)


def _uri(namespace: str, name: str) -> str:
    """The location OpenLineage's naming gives: `file` and a path, or an object store's
    `s3://bucket` and a key. A name that is a whole URI already (Custody's own events on a lake in
    an object store) stands alone."""
    if "://" in name:
        return name
    if namespace.startswith(("s3://", "s3a://", "s3n://")):
        return f"{namespace.rstrip('/')}/{name.lstrip('/')}"
    return name


def _version_at(session: Session, location: str) -> VersionRow | None:
    """The version whose folder is `location` or holds it."""
    path = PurePosixPath(location)
    candidates = [path.as_posix(), *(parent.as_posix() for parent in path.parents if parent.as_posix() != ".")]
    return session.exec(select(VersionRow).where(col(VersionRow.path).in_(candidates))).first()


def _asset_at(session: Session, location: str, version: str) -> VersionRow | None:
    """The version `version` of the asset whose folder (zone/domain/name) is `location`."""
    parts = PurePosixPath(location).parts
    if len(parts) != 3 or parts[0] not in ZONES or not version.isdigit():
        return None
    query = select(VersionRow).where(
        col(VersionRow.asset_key) == f"{parts[1]}/{parts[2]}",
        col(VersionRow.number) == int(version),
        col(VersionRow.zone) == parts[0],
    )
    return session.exec(query).first()


def _insert_new(session: Session, table: Table, row: Mapping[str, Any]) -> bool:
    """Insert `row` unless a row with the same unique values is there: whether it was inserted."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    result = session.execute(insert(table).values(**row).on_conflict_do_nothing())
    return bool(result.rowcount)  # type: ignore[attr-defined]
