"""Other tools' runs and jobs as their users look them up, as Marquez shows them: a run by its id
(or the beginning of it), with what it read and wrote, its facets and, for auditors, its events as
received; the jobs reported, each with its runs counted by state; and a job's runs, newest first."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import text
from sqlmodel import Session, col, func, select

from governance.catalog.ledgerfilter import SHORTEST_RUN_PREFIX
from governance.catalog.models import ForeignDataset, ForeignEvent, ForeignIO, ForeignRun, VersionRow
from governance.errors import InvalidInput, NotFound, shown
from governance.foreign.datasets import ENDED, INPUT, OUTPUT, ident
from governance.foreign.nodes import MOST_LISTED

JOB_EVENTS = (
    "SELECT namespace, name, event_time, body FROM foreign_static_event WHERE kind = 'job' ORDER BY event_time, id"
)
DATASET_EVENTS = (
    "SELECT body FROM foreign_static_event WHERE kind = 'dataset' AND ident = :ident ORDER BY event_time, id"
)
DATASET_RUNS = (
    "SELECT io.direction, COUNT(DISTINCT io.run_id) FROM foreign_io io JOIN foreign_dataset d ON d.id = io.dataset_id "
    "WHERE d.ident = :ident GROUP BY io.direction"
)
JOB_STATES = (
    "SELECT job_namespace, job_name, state, COUNT(*), MAX(state_time) FROM foreign_run "
    "GROUP BY job_namespace, job_name, state"
)
# The most run ids an ambiguous beginning is answered with.
AMBIGUOUS_SHOWN = 5
# The most events a run's answer carries: Spark's listener sends one a stage on a long job.
MOST_EVENTS = 1_000


def found_run(session: Session, given: str) -> ForeignRun:
    """The run whose id is `given`, or begins with it (at least SHORTEST_RUN_PREFIX characters, as
    Custody prints run ids); NotFound, or InvalidInput for a beginning several runs' ids share."""
    run_id = given.strip().lower()
    if (run := session.get(ForeignRun, run_id)) is not None:
        return run
    if len(run_id) < SHORTEST_RUN_PREFIX:
        raise InvalidInput(f"run {shown(given)}: give at least {SHORTEST_RUN_PREFIX} characters of a run's id")
    column = col(ForeignRun.run_id)
    query = select(ForeignRun).where(func.substr(column, 1, len(run_id)) == run_id).limit(AMBIGUOUS_SHOWN)
    found = list(session.exec(query))
    if not found:
        raise NotFound(f"no run of another tool's job has an id beginning {shown(given)}")
    if len(found) > 1:
        named = ", ".join(sorted(run.run_id for run in found))
        raise InvalidInput(f"run {shown(given)} is the beginning of several runs' ids ({named}): give more of it")
    return found[0]


def run_detail(session: Session, given: str, with_events: bool = False) -> dict[str, Any]:
    """A foreign run (see `found_run`): what its events say of it, what it read (each input that is
    a Custody version named, or the version it waits for) and wrote, and the runs it is the parent
    of. With `with_events` (for auditors: facets may carry a stack trace, a job's properties, its
    environment), its run facets as its events left them (a later event's facet over an earlier
    one's) and its events as received, in order."""
    try:
        run = found_run(session, given)
    except NotFound:
        # A run that sent no event of its own (an Airflow DAG run, say) is known by the runs it is the parent of.
        children = _children(session, given.strip().lower())
        if not children:
            raise
        alone = _parent_alone(children)
        return {**alone, "facets": {}, "events": []} if with_events else alone
    said = {
        **run_summary(run),
        "producer": run.producer,
        "inputs": _datasets(session, run.run_id, INPUT),
        "outputs": _datasets(session, run.run_id, OUTPUT),
        "children": [run_summary(child) for child in _children(session, run.run_id)],
        "events_received": _received(session, run.run_id),
    }
    if with_events:
        # Read and parsed only for an auditor: a long Spark job sends hundreds of events.
        bodies = _bodies(session, run.run_id)
        facets: dict[str, Any] = {}
        for body in bodies:
            facets.update((body.get("run") or {}).get("facets") or {})
        said["facets"], said["events"] = facets, bodies[:MOST_EVENTS]
    return said


def _parent_alone(children: Sequence[ForeignRun]) -> dict[str, Any]:
    """A parent run that reported nothing itself, as the runs it is the parent of name it."""
    child = children[0]
    return {
        "run_id": child.parent_run_id,
        "job_namespace": child.parent_job_namespace,
        "job_name": child.parent_job_name,
        "state": "NOT REPORTED",
        "started_at": None,
        "ended_at": None,
        "user": None,
        "reporter": None,
        "error": None,
        "parent": None,
        "producer": None,
        "inputs": [],
        "outputs": [],
        "children": [run_summary(run) for run in children],
        "events_received": 0,
    }


def run_summary(run: ForeignRun) -> dict[str, Any]:
    """A run in a few fields, as a job's history lists it."""
    return {
        "run_id": run.run_id,
        "job_namespace": run.job_namespace,
        "job_name": run.job_name,
        "state": run.state,
        "started_at": run.started_at,
        "ended_at": run.state_time if run.state in ENDED else None,
        "user": run.user,
        "reporter": run.reporter,
        "error": run.error,
        "parent": None
        if run.parent_run_id is None
        else {
            "run_id": run.parent_run_id,
            "job_namespace": run.parent_job_namespace,
            "job_name": run.parent_job_name,
        },
    }


def jobs(session: Session, limit: int = MOST_LISTED) -> list[dict[str, Any]]:
    """The jobs other tools reported runs or job events of, the last active first: each with its
    runs counted by state, its last run, and what its last job event declared it reads and writes."""
    counted: dict[tuple[str, str], dict[str, Any]] = {}

    def job(namespace: str, name: str) -> dict[str, Any]:
        blank = {"namespace": namespace, "name": name, "runs": 0, "states": {}, "last_active": "", "declared": None}
        return counted.setdefault((namespace, name), blank)

    for namespace, name, state, count, last in session.connection().execute(text(JOB_STATES)):
        found = job(namespace, name)
        found["runs"] += count
        found["states"][state] = count
        found["last_active"] = max(found["last_active"], last or "")
    for namespace, name, event_time, body in session.connection().execute(text(JOB_EVENTS)):
        found = job(namespace, name)
        found["declared"] = _declared(json.loads(body))
        found["last_active"] = max(found["last_active"], event_time)
    listed = sorted(counted.values(), key=lambda job: (job["last_active"], job["namespace"], job["name"]), reverse=True)
    for found in listed[:limit]:
        found["last_run"] = job_runs(session, found["namespace"], found["name"], 1)[0] if found["runs"] else None
    return listed[:limit]


def _declared(body: Mapping[str, Any]) -> dict[str, list[dict[str, str]]]:
    """The datasets a job event says its job reads and writes."""
    return {
        side: [{"namespace": dataset["namespace"], "name": dataset["name"]} for dataset in body.get(side) or ()]
        for side in ("inputs", "outputs")
    }


def dataset_detail(session: Session, namespace: str, name: str) -> dict[str, Any]:
    """A dataset as other tools reported it: the facets its dataset events gave (a later event's facet
    over an earlier one's), and how many runs read and wrote it; NotFound for one nothing named."""
    facets: dict[str, Any] = {}
    events = 0
    for (body,) in session.connection().execute(text(DATASET_EVENTS), {"ident": ident(namespace, name)}):
        facets.update((json.loads(body).get("dataset") or {}).get("facets") or {})
        events += 1
    asked = {"ident": ident(namespace, name)}
    used: dict[str, int] = {
        str(side): int(runs) for side, runs in session.connection().execute(text(DATASET_RUNS), asked)
    }
    if not events and not used:
        raise NotFound(f"no event of another tool named the dataset {shown(namespace)}/{shown(name)}")
    return {
        "namespace": namespace,
        "name": name,
        "facets": facets,
        "events_received": events,
        "read_by_runs": used.get(INPUT, 0),
        "written_by_runs": used.get(OUTPUT, 0),
    }


def job_runs(session: Session, namespace: str, name: str, limit: int = MOST_LISTED) -> list[dict[str, Any]]:
    """The runs of a job, the last started (else the last to change state) first; NotFound for a
    job no run was reported of."""
    query = (
        select(ForeignRun)
        .where(col(ForeignRun.job_ident) == ident(namespace, name))
        .order_by(func.coalesce(col(ForeignRun.started_at), col(ForeignRun.state_time)).desc(), col(ForeignRun.run_id))
        .limit(limit)
    )
    runs = [run_summary(run) for run in session.exec(query)]
    if not runs:
        raise NotFound(f"no run of job {shown(namespace)}/{shown(name)} was reported")
    return runs


def _received(session: Session, run_id: str) -> int:
    return session.exec(select(func.count()).where(col(ForeignEvent.run_id) == run_id)).one()


def _bodies(session: Session, run_id: str) -> list[Mapping[str, Any]]:
    query = (
        select(ForeignEvent.body)
        .where(col(ForeignEvent.run_id) == run_id)
        .order_by(col(ForeignEvent.event_time), col(ForeignEvent.id))
    )
    return [json.loads(body) for body in session.exec(query)]


def _datasets(session: Session, run_id: str, direction: str) -> list[dict[str, Any]]:
    query = (
        select(ForeignDataset, ForeignIO, col(VersionRow.asset_key), col(VersionRow.number))
        .join(ForeignIO, col(ForeignIO.dataset_id) == col(ForeignDataset.id))
        .outerjoin(VersionRow, col(VersionRow.id) == col(ForeignIO.version_id))
        .where(col(ForeignIO.run_id) == run_id, col(ForeignIO.direction) == direction)
        .order_by(col(ForeignDataset.namespace), col(ForeignDataset.name), col(ForeignDataset.version))
    )
    found = []
    for dataset, used, asset, number in session.exec(query):
        said: dict[str, Any] = {
            "namespace": dataset.namespace,
            "name": dataset.name,
            "version": dataset.version or None,
        }
        if asset is not None:
            said["custody"] = f"{asset}@{number}"
        if used.awaits_asset is not None:
            said["waiting_for"] = f"{used.awaits_asset}@{used.awaits_number}"
        found.append(said)
    return found


def _children(session: Session, run_id: str) -> Sequence[ForeignRun]:
    query = (
        select(ForeignRun)
        .where(col(ForeignRun.parent_run_id) == run_id)
        .order_by(col(ForeignRun.started_at), col(ForeignRun.run_id))
        .limit(MOST_LISTED)
    )
    return list(session.exec(query))
