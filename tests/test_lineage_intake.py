"""The lineage intake, in process, on SQLite and on PostgreSQL: the OpenLineage endpoint's reports
that wait together are decided and kept in one transaction, and each is answered for itself."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Sequence

import pytest
from sqlmodel import col, select

from governance import ledger
from governance.api import Custody
from governance.catalog.models import ForeignEvent, LedgerEntry
from governance.config import Settings
from governance.errors import AccessDenied, InvalidInput
from governance.foreign.join import Received
from governance.service.intake import Intake
from governance.service.sessions import Principal, reference_of

pytestmark = pytest.mark.both_backends
PRODUCER = "https://example.com/reports"


def body(run_id: str) -> bytes:
    return json.dumps(
        {
            "eventType": "START",
            "eventTime": "2026-11-27T05:00:00Z",
            "producer": PRODUCER,
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "run": {"runId": run_id},
            "job": {"namespace": "airflow://reports", "name": "daily"},
            "inputs": [],
            "outputs": [{"namespace": "postgres://warehouse", "name": "reports.daily"}],
        }
    ).encode()


def principal(user: str) -> Principal:
    return Principal(user, "password", f"session-of-{user}-{uuid.uuid4()}", "api")


def taken_together(
    custody: Custody, first: tuple[Principal, bytes], rest: Sequence[tuple[Principal, bytes]]
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
        intake = Intake(custody, lambda: custody.specs)
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
    sessions = {reference_of(p.session) for p in principals}
    with custody.store.session() as session:
        entries = session.exec(
            select(LedgerEntry).where(col(LedgerEntry.action) == "lineage.report").order_by(col(LedgerEntry.seq))
        ).all()
    return [entry for entry in entries if json.loads(entry.details)["session"] in sessions]


def kept(custody: Custody, run_id: str) -> int:
    with custody.store.session() as session:
        return len(session.exec(select(ForeignEvent).where(col(ForeignEvent.run_id) == run_id)).all())


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
