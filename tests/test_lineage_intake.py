"""The lineage intake, in process, on SQLite and on PostgreSQL: the OpenLineage endpoint's reports
that wait together are decided and kept in one transaction, and each is answered for itself."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from sqlmodel import col, select

from governance import ledger
from governance.api import Custody
from governance.catalog.models import ForeignEvent, ForeignRun, LedgerEntry
from governance.config import Settings
from governance.errors import AccessDenied, InvalidInput
from governance.foreign.join import Received
from governance.service.intake import Intake
from governance.service.sessions import Principal, key_of
from governance.spec import SpecSet
from tests.graphs import add_version

pytestmark = pytest.mark.both_backends
PRODUCER = "https://example.com/reports"
TAGS = "https://openlineage.io/spec/facets/1-0-0/TagsRunFacet.json#/$defs/TagsRunFacet"
VERSION = "https://openlineage.io/spec/facets/1-0-1/DatasetVersionDatasetFacet.json#/$defs/DatasetVersionDatasetFacet"


def body(run_id: str, state: str = "START", *, reads: Sequence[str] = (), user: str | None = None) -> bytes:
    """A run event that read the files `reads`, as `user` says its run's `user` tag."""
    run: dict = {"runId": run_id}
    if user is not None:
        run["facets"] = {"tags": {"_producer": PRODUCER, "_schemaURL": TAGS, "tags": [{"key": "user", "value": user}]}}
    return json.dumps(
        {
            "eventType": state,
            "eventTime": "2026-11-27T05:00:00Z" if state == "START" else "2026-11-27T05:10:00Z",
            "producer": PRODUCER,
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": run,
            "job": {"namespace": "airflow://reports", "name": "daily"},
            "inputs": [{"namespace": "file", "name": name} for name in reads],
            "outputs": [{"namespace": "postgres://warehouse", "name": "reports.daily"}],
        }
    ).encode()


def principal(user: str) -> Principal:
    return Principal(user, "password", key_of(f"session-of-{user}-{uuid.uuid4()}"), "api")


def taken_together(
    custody: Custody,
    first: tuple[Principal, bytes],
    rest: Sequence[tuple[Principal, bytes]],
    specs: Callable[[], SpecSet] | None = None,
) -> list[list[Received] | BaseException]:
    """What the intake answers `rest`, posted while it waits to keep `first`: the catalog's writer
    is held meanwhile by another transaction, so `rest` all wait in the queue at once."""
    holding, release = threading.Event(), threading.Event()

    def hold_the_writer() -> None:
        with custody.store.session() as session:
            ledger.lock(session)
            holding.set()
            release.wait(timeout=60)

    async def post() -> list[list[Received] | BaseException]:
        intake = Intake(custody, specs or (lambda: custody.specs))
        intake.start()
        try:
            waiting = asyncio.ensure_future(intake.take(*first))
            await asyncio.sleep(0)  # the task queues `first`
            while not intake._waiting.empty():  # the intake has taken `first`, and waits for the writer
                await asyncio.sleep(0.01)
            answers = [asyncio.ensure_future(intake.take(*report)) for report in rest]
            while intake._waiting.qsize() < len(rest):
                await asyncio.sleep(0.01)
            release.set()
            await asyncio.gather(waiting, return_exceptions=True)
            return await asyncio.gather(*answers, return_exceptions=True)
        finally:
            intake.stop()

    holder = threading.Thread(target=hold_the_writer)
    holder.start()
    assert holding.wait(timeout=60)
    try:
        return asyncio.run(post())
    finally:
        release.set()
        holder.join(timeout=60)


def decisions(custody: Custody, *principals: Principal) -> list[LedgerEntry]:
    sessions = {p.reference for p in principals}
    with custody.store.session() as session:
        entries = session.exec(
            select(LedgerEntry).where(col(LedgerEntry.action) == "lineage.report").order_by(col(LedgerEntry.seq))
        ).all()
    return [entry for entry in entries if json.loads(entry.details)["session"] in sessions]


def kept(custody: Custody, run_id: str) -> int:
    with custody.store.session() as session:
        return len(session.exec(select(ForeignEvent).where(col(ForeignEvent.run_id) == run_id)).all())


def received_at(custody: Custody, *run_ids: str) -> set:
    with custody.store.session() as session:
        return set(session.exec(select(ForeignEvent.received_at).where(col(ForeignEvent.run_id).in_(run_ids))).all())


@pytest.fixture
def custody(cli_env: Settings) -> Custody:
    return Custody(Settings.from_env())


def test_reports_waiting_together_are_decided_and_kept_in_one_transaction(custody: Custody):
    bots = [principal("lineage-bot") for _ in range(3)]
    runs = [str(uuid.uuid4()) for _ in bots]

    answers = taken_together(
        custody, (principal("lineage-bot"), body(str(uuid.uuid4()))), list(zip(bots, map(body, runs), strict=True))
    )

    assert [[each.run_id for each in answer] for answer in answers] == [[run] for run in runs]
    assert [kept(custody, run) for run in runs] == [1, 1, 1]
    # Their events are kept all at once (one statement, one time of receipt), not one request after the other.
    assert len(received_at(custody, *runs)) == 1
    entries = decisions(custody, *bots)
    # One transaction appends a batch's decisions together: one after the other, at one time.
    assert [entry.seq - entries[0].seq for entry in entries] == [0, 1, 2]
    assert {entry.ts for entry in entries} == {entries[0].ts}


def test_a_refused_or_invalid_report_is_answered_for_itself_and_the_others_are_kept(custody: Custody):
    allowed, outsider, careless = principal("lineage-bot"), principal("bob"), principal("lineage-bot")
    run = str(uuid.uuid4())

    answers = taken_together(
        custody,
        (principal("lineage-bot"), body(str(uuid.uuid4()))),
        [(outsider, body(str(uuid.uuid4()))), (allowed, body(run)), (careless, b"{not json")],
    )

    refused, [received], invalid = answers
    assert isinstance(refused, AccessDenied) and "needs the lineage group" in str(refused)
    assert isinstance(invalid, InvalidInput) and str(invalid).startswith("the body is not JSON")
    assert received.run_id == run and kept(custody, run) == 1
    # Every decision is recorded, the refusal too; the careless reporter was allowed, its body was not valid.
    results = {entry.actor: json.loads(entry.details)["result"] for entry in decisions(custody, outsider, careless)}
    assert results == {"bob": "denied", "lineage-bot": "allowed"}


def test_a_run_s_events_in_one_batch_are_kept_and_joined_in_the_order_they_came(custody: Custody):
    add_version(custody.store, "sales/clients", 1, zone="landing")
    read = str(Path(custody.lake.root).resolve() / "landing/sales/clients/v=1")
    run, bot = str(uuid.uuid4()), principal("lineage-bot")
    start, complete = body(run, reads=[read], user="bob"), body(run, "COMPLETE", reads=[read], user="bob")

    answers = taken_together(
        custody, (principal("lineage-bot"), body(str(uuid.uuid4()))), [(bot, start), (bot, complete), (bot, start)]
    )

    assert [[(each.event_type, each.stored) for each in answer] for answer in answers] == [
        [("START", True)],
        [("COMPLETE", True)],
        [("START", False)],
    ]
    version = {"namespace": "file", "name": read, "version": "sales/clients@1"}
    assert [each.inputs for [each] in answers] == [[version], [version], []]
    assert kept(custody, run) == 2
    with custody.store.session() as session:
        joined = session.get(ForeignRun, run)
    assert joined is not None
    assert (joined.state, joined.started_at, joined.user) == ("COMPLETE", "2026-11-27T05:00:00Z", "bob")


def test_a_report_whose_joining_fails_in_a_batch_is_kept_and_said_not_joined_and_the_others_are_joined(
    custody: Custody,
):
    add_version(custody.store, "sales/clients", 1, zone="landing")
    read = str(Path(custody.lake.root).resolve() / "landing/sales/clients/v=1")
    judged, unjudged = str(uuid.uuid4()), str(uuid.uuid4())

    def no_specs() -> SpecSet:
        raise InvalidInput("the specs cannot be read")

    # The reads of a run that names its user are held to the specs' roles, which cannot be read;
    # a run that names none is recorded outside policy without them.
    answers = taken_together(
        custody,
        (principal("lineage-bot"), body(str(uuid.uuid4()))),
        [
            (principal("lineage-bot"), body(judged, reads=[read], user="bob")),
            (principal("lineage-bot"), body(unjudged, reads=[read])),
        ],
        specs=no_specs,
    )

    [failed], [joined] = answers
    assert (failed.stored, failed.inputs, failed.unjoined) == (True, [], "the specs cannot be read")
    assert (joined.stored, joined.unjoined, joined.inputs[0]["version"]) == (True, None, "sales/clients@1")
    assert (kept(custody, judged), kept(custody, unjudged)) == (1, 1)
    with custody.store.session() as session:
        runs = session.exec(select(ForeignRun.run_id)).all()
        outside = session.exec(select(LedgerEntry).where(col(LedgerEntry.action) == "read.outside-policy")).all()
    # The failed joining's run was taken back with it; its event is kept.
    assert unjudged in runs and judged not in runs
    assert [(entry.run_id, json.loads(entry.details)["reason"]) for entry in outside] == [
        (unjudged, "the run reported no user")
    ]


def test_a_report_whose_event_names_no_version_is_refused_alone_and_its_batch_is_joined(custody: Custody):
    add_version(custody.store, "sales/clients", 1, zone="landing")
    lake = Path(custody.lake.root).resolve()
    huge, fine = str(uuid.uuid4()), str(uuid.uuid4())
    # The asset's folder, at a version number past what the database's integers hold.
    event = json.loads(body(huge, reads=[str(lake / "landing/sales/clients")]))
    event["inputs"][0]["facets"] = {
        "version": {"_producer": PRODUCER, "_schemaURL": VERSION, "datasetVersion": "99999999999999999999"}
    }

    answers = taken_together(
        custody,
        (principal("lineage-bot"), body(str(uuid.uuid4()))),
        [
            (principal("lineage-bot"), json.dumps(event).encode()),
            (principal("lineage-bot"), body(fine, reads=[str(lake / "landing/sales/clients/v=1")])),
        ],
    )

    [refused], [joined] = answers
    assert refused.refused is not None and "names no version" in refused.refused
    assert (joined.unjoined, joined.inputs[0]["version"]) == (None, "sales/clients@1")
    assert (kept(custody, huge), kept(custody, fine)) == (0, 1)
