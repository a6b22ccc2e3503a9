"""Lineage reports taken in bulk. The OpenLineage endpoint's requests queue for one thread of the
serving process, which decides every request waiting at that moment and keeps their events in the
transaction that records those decisions: a busy endpoint writes once for many requests, and a
request waits for that one thread rather than for a thread of its own."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING

from anyio import to_thread

from governance import ledger
from governance.access.guard import decision_entries
from governance.access.policy import Decision, Policy, Verb
from governance.api import Custody
from governance.errors import (
    AccessDenied,
    CustodyError,
    DirectoryUnavailable,
    NotJoinedTogether,
    ServiceUnavailable,
    TransactionLost,
    error_summary,
)
from governance.foreign.events import Event, RunEvent, StaticEvent, parse
from governance.foreign.join import Received, Sql, apart, receiving, together
from governance.foreign.judge import reader_judge
from governance.foreign.statics import StaticReceived
from governance.foreign.statics import keep as keep_statics
from governance.foreign.waiting import join_waiting
from governance.service.api import identity_of, recorded
from governance.service.sessions import Principal
from governance.spec import SpecSet

if TYPE_CHECKING:
    from sqlmodel import Session

logger = logging.getLogger(__name__)

# The most requests one transaction takes: the rest wait for the next, which begins at once.
MOST_AT_ONCE = 256
# And the most events: a transaction holds the catalog's writer, which every other writer waits for.
MOST_EVENTS = 1_000
# The largest body parsed in the event loop (some dozens of events): a larger one is parsed in a worker thread.
PARSED_AT_ONCE = 64 * 1024
# How often reads waiting for a version are joined to those committed meanwhile, in seconds.
JOIN_WAITING_EVERY = 2.0
# What a request is answered with: what became of its events, or why it was refused.
Said = Received | StaticReceived
Answer = list[Said] | Exception


@dataclass(frozen=True)
class Report:
    """One request: who posted it, its events (or why they are not valid), and where its answer goes."""

    principal: Principal
    events: list[Event] | CustodyError
    answer: asyncio.Future[list[Said]]


class Intake:
    """The thread that takes a process's lineage reports, started and stopped with its app."""

    def __init__(self, custody: Custody, specs: Callable[[], SpecSet]):
        self.custody = custody
        self.specs = specs
        self._waiting: queue.SimpleQueue[Report | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start taking reports; called in the app's event loop, where answers are given."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._serve, name="custody-lineage-intake", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Take the reports already queued, then stop."""
        if self._thread is not None:
            self._waiting.put(None)
            self._thread.join()
            self._thread = None

    async def take(self, principal: Principal, body: bytes) -> list[Said]:
        """What became of each event the request posted, once decided, kept and joined. AccessDenied
        if the principal may not report lineage, InvalidInput if an event is not valid."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            raise ServiceUnavailable("the service is not taking lineage reports: it is starting, stopping or failed")
        # Parsed here, not by the one thread that keeps every request's events; a large body in a
        # worker thread, lest it hold up the other requests' answers.
        events = _parsed(body) if len(body) <= PARSED_AT_ONCE else await to_thread.run_sync(_parsed, body)
        answer: asyncio.Future[list[Said]] = self._loop.create_future()
        self._waiting.put(Report(principal, events, answer))
        return await answer

    def _serve(self) -> None:
        # The first reports are taken at once: the waiting reads are first looked at a turn later.
        due = time.monotonic() + JOIN_WAITING_EVERY
        while True:
            if time.monotonic() >= due:
                self._join_waiting()
                due = time.monotonic() + JOIN_WAITING_EVERY
            try:
                first = self._waiting.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                continue
            if first is None:
                return
            # The event loop queues the requests that came meanwhile only once it holds the
            # interpreter: offer it, so that they may join this batch rather than wait for the next.
            time.sleep(0)
            reports, events = [first], _count(first)
            stopping = False
            while len(reports) < MOST_AT_ONCE and events < MOST_EVENTS and not self._waiting.empty():
                if (report := self._waiting.get()) is None:
                    stopping = True
                    break
                reports.append(report)
                events += _count(report)
            try:
                answers: Sequence[Answer] = self.custody.deciding(partial(self._take, reports))
            except Exception as err:  # noqa: BLE001 - not swallowed: every request of the batch is answered with it
                answers = [err] * len(reports)
            except BaseException:
                # The process is being interrupted: the endpoint says so from now on (see `take`).
                self._answer(reports, [ServiceUnavailable("the lineage intake was interrupted")] * len(reports))
                raise
            self._answer(reports, answers)
            if stopping:
                return

    def _join_waiting(self) -> None:
        """Join the reads that waited for a version committed since (see governance.foreign.waiting)."""
        try:
            joined = self.custody.deciding(
                lambda policy, pinned: join_waiting(self.custody.store, reader_judge(policy, self.specs), pinned)
            )
        except Exception as err:  # noqa: BLE001 - logged, and tried again at the next turn: the intake goes on
            # Meanwhile the reads wait, as they say.
            logger.warning("the reads waiting for versions were not joined: %s", error_summary(err))
            return
        for read in joined:
            logger.info("run %s's read of %s joined, now that it is committed", read.run_id, read.ref)

    def _answer(self, reports: Sequence[Report], answers: Sequence[Answer]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(_settle, reports, answers)

    def _take(self, reports: Sequence[Report], policy: Policy, pinned: Mapping[str, str]) -> list[Answer]:
        """Decide each report, then record every decision and keep the allowed reports' events in one
        transaction. Under settings an admin has changed meanwhile, SettingsChanged (nothing done)."""
        decisions = [report_decision(policy, report.principal) for report in reports]
        refused: dict[int, Exception] = {}
        kept: list[tuple[Report, list[Event]]] = []
        for i, (report, decision) in enumerate(zip(reports, decisions, strict=True)):
            if not decision.allowed:
                refused[i] = AccessDenied(f"denied: {decision.reason}")
                continue
            if isinstance(report.events, CustodyError):  # allowed, but nothing to keep
                refused[i] = report.events
            else:
                kept.append((report, report.events))
        judge = reader_judge(policy, cache(self.specs))
        lake = self.custody.lake

        def keep(session: Session) -> tuple[list[Answer], list[ledger.Event]]:
            # Dataset and job events are rare: requests that carry some are kept one by one, below.
            if len(kept) > 1 and not any(_statics(events) for _, events in kept):
                try:
                    with apart(session):
                        taken = [(_runs(events), report.principal.user) for report, events in kept]
                        joined, asked = together(lake, taken, judge)(session)
                        answered: list[Answer] = [list(said) for said in joined]
                        return answered, asked
                except NotJoinedTogether:
                    pass  # undone: taken again below, one request at a time, each answered with what it meets
            answers: list[Answer] = []
            entries: list[ledger.Event] = []
            for report, events in kept:
                try:
                    with apart(session):
                        user = report.principal.user
                        received, asked = receiving(lake, _runs(events), user, judge)(session)
                        statics = keep_statics(Sql(session), _statics(events), user)
                except TransactionLost:
                    raise  # nothing more may be written: the whole batch fails with it
                except Exception as err:  # noqa: BLE001 - not swallowed: that request is answered with it
                    answers.append(err)
                    continue
                answers.append(_in_order(events, received, statics))
                entries.extend(asked)
            return answers, entries

        entries = decision_entries([(d, recorded(r.principal)) for r, d in zip(reports, decisions, strict=True)])
        answers = iter(self.custody.store.record_then(entries, keep, pinned))
        return [refused[i] if i in refused else next(answers) for i in range(len(reports))]


def _runs(events: Sequence[Event]) -> list[RunEvent]:
    return [event for event in events if isinstance(event, RunEvent)]


def _statics(events: Sequence[Event]) -> list[StaticEvent]:
    return [event for event in events if isinstance(event, StaticEvent)]


def _in_order(events: Sequence[Event], runs: Sequence[Received], statics: Sequence[StaticReceived]) -> list[Said]:
    """What became of each event, in the request's order."""
    run_said, static_said = iter(runs), iter(statics)
    return [next(run_said) if isinstance(event, RunEvent) else next(static_said) for event in events]


def _count(report: Report) -> int:
    return 0 if isinstance(report.events, CustodyError) else len(report.events)


def _parsed(body: bytes) -> list[Event] | CustodyError:
    try:
        return parse(body)
    except CustodyError as err:
        return err


def _settle(reports: Sequence[Report], answers: Sequence[Answer]) -> None:
    for report, answer in zip(reports, answers, strict=True):
        if report.answer.done():  # the request was given up (its client went away)
            continue
        if isinstance(answer, Exception):
            report.answer.set_exception(answer)
        else:
            report.answer.set_result(answer)


def report_decision(policy: Policy, principal: Principal) -> Decision:
    """Whether the principal may report lineage: a member of the lineage group. A directory that
    cannot be asked denies."""
    identity = identity_of(principal)
    try:
        groups = policy.directory.groups_of(principal.user)
    except DirectoryUnavailable as err:
        return Decision(identity, Verb.LINEAGE_REPORT, None, False, error_summary(err))
    if policy.lineage_group in groups:
        reason = f"{principal.user} reports lineage as a member of {policy.lineage_group}"
        return Decision(identity, Verb.LINEAGE_REPORT, None, True, reason)
    reason = f"{principal.user} may not report lineage: it needs the lineage group ({policy.lineage_group})"
    return Decision(identity, Verb.LINEAGE_REPORT, None, False, reason)
