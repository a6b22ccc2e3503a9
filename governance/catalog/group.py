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

from governance.errors import CustodyError

if TYPE_CHECKING:  # the ledger's module imports the catalog's
    from governance.ledger import Appended, Event

# What commits a batch: all its events, in order, in one transaction; where each went.
Commit = Callable[[Sequence["Event"]], Sequence["Appended"]]


class Committed(NamedTuple):
    """Where a thread's entries went; and the whole batch's, when that thread committed it."""

    appended: Sequence[Appended]
    batch: Sequence[Appended]


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
        batch: Sequence[Appended] = ()
        with self._turn:
            self._waiting.append(ticket)
            while not ticket.done:
                if self._committing:
                    self._turn.wait()
                    continue
                # A thread commits at most once: the batch it takes holds its own ticket.
                batch = self._commit_waiting(commit)
        if ticket.error is not None:
            # Every thread of a failed batch raises the same error, as the waiters of a future do.
            raise ticket.error
        return Committed(ticket.appended, batch)

    def _commit_waiting(self, commit: Commit) -> Sequence[Appended]:
        """Commit every waiting ticket as one transaction; called holding the condition, which is
        released while the transaction runs so that others can queue behind it. Where they went."""
        batch, self._waiting = self._waiting, []
        self._committing = True
        appended: Sequence[Appended] = ()
        error: Exception | None = None
        self._turn.release()
        try:
            appended = commit([event for ticket in batch for event in ticket.events])
        # What the catalog raises: its CHECKPOINT_FAILURES (not imported: its module imports this one).
        except (CustodyError, SQLAlchemyError, OSError) as err:
            error = err
        except BaseException as err:
            error = CustodyError(f"the transaction that held these ledger entries failed: {type(err).__name__}")
            raise
        finally:
            self._turn.acquire()
            self._committing = False
            start = 0
            for ticket in batch:
                ticket.done, ticket.error = True, error
                ticket.appended = appended[start : start + len(ticket.events)]
                start += len(ticket.events)
            self._turn.notify_all()
        return appended
