"""Group commit of ledger entries: the threads of one process that append at the same moment (the
service's, each recording a decision) share one transaction. One of them commits what all of them
brought while the others wait for it, so a busy service makes one write where it would make one per
request, and no thread returns before its own entries are committed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from sqlalchemy.exc import SQLAlchemyError

from governance.errors import CatalogUnavailable, CustodyError

if TYPE_CHECKING:  # the ledger's module imports the catalog's
    from governance.ledger import Appended, Event

# What commits a batch: all its events, in order, in one transaction; where each went.
Commit = Callable[[Sequence["Event"]], Sequence["Appended"]]


class Committed(NamedTuple):
    """Where a thread's entries went, and whether that thread ran the transaction."""

    appended: Sequence[Appended]
    here: bool


@dataclass
class _Ticket:
    events: Sequence[Event]
    done: bool = False
    appended: Sequence[Appended] = ()
    error: Exception | None = None


@dataclass
class GroupCommit:
    """The appends waiting for one catalog in this process, and whether one is committing now."""

    _waiting: list[_Ticket] = field(default_factory=list)
    _committing: bool = False
    _turn: threading.Condition = field(default_factory=threading.Condition)

    def append(self, events: Sequence[Event], commit: Commit) -> Committed:
        """Append `events` (in order, together) with whatever other threads bring meanwhile. Returns
        once they are committed; raises what failed the transaction that held them."""
        ticket = _Ticket(events)
        here = False
        with self._turn:
            self._waiting.append(ticket)
            while not ticket.done:
                if self._committing:
                    self._turn.wait()
                    continue
                # A thread commits at most once: the batch it takes holds its own ticket.
                self._commit_waiting(commit)
                here = True
        if ticket.error is not None:
            raise ticket.error
        return Committed(ticket.appended, here)

    def _commit_waiting(self, commit: Commit) -> None:
        """Commit every waiting ticket as one transaction; called holding the condition, which is
        released while the transaction runs so that others can queue behind it."""
        batch, self._waiting = self._waiting, []
        self._committing = True
        appended: Sequence[Appended] = ()
        # Until the commit returns, the batch has failed: whatever stops it fails every ticket.
        error: Exception | None = CatalogUnavailable("the transaction that held these ledger entries did not finish")
        self._turn.release()
        try:
            appended = commit([event for ticket in batch for event in ticket.events])
            error = None
        except (CustodyError, SQLAlchemyError, OSError) as err:
            error = err
        finally:
            self._turn.acquire()
            self._committing = False
            start = 0
            for ticket in batch:
                ticket.done, ticket.error = True, error
                ticket.appended = appended[start : start + len(ticket.events)]
                start += len(ticket.events)
            self._turn.notify_all()
