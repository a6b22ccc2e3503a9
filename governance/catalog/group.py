"""Group commit of ledger entries: the threads of one process that append at the same moment (the
service's, each recording a decision) share one transaction. One of them commits what all of them
brought while the others wait for it, so a busy service makes one write where it would make one per
request, and no thread returns before its own entries are committed. A thread's entries may be
conditional on the policy settings they were decided under: the transaction leaves them out if an
admin has changed those since, and that thread alone is told they were refused."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy.exc import SQLAlchemyError

from governance.errors import CustodyError

if TYPE_CHECKING:  # the ledger's module imports the catalog's
    from sqlmodel import Session

    from governance.ledger import Appended, Event

# Work done inside the transaction that holds a thread's entries: it returns its result and the
# entries it calls for in turn (appended after it).
Work = Callable[["Session"], tuple[Any, Sequence["Event"]]]


class Append(NamedTuple):
    """One thread's events, the policy settings they need to be still pinned, if any, and the work
    to do once they are appended, if any."""

    events: Sequence[Event]
    settings: Mapping[str, str] | None = None
    work: Work | None = None


class Outcome(NamedTuple):
    """Where an append's entries went (its work's last), and what its work returned, or what it
    raised (its changes then undone, its entries kept)."""

    appended: Sequence[Appended]
    result: Any = None
    failed: Exception | None = None


# What commits a batch: in one transaction, in order, the events of every append whose settings
# hold, then their work; for each append, its outcome, or None when its settings had changed.
Commit = Callable[[Sequence[Append]], Sequence[Outcome | None]]


class Committed(NamedTuple):
    """Where a thread's entries went; the whole batch's, in order, when that thread committed it;
    whether its own were refused, their settings having changed (then none of them was committed,
    nor its work done); and what its work returned."""

    appended: Sequence[Appended]
    batch: Sequence[Appended]
    refused: bool = False
    result: Any = None
    failed: Exception | None = None


@dataclass
class _Ticket:
    append: Append
    done: bool = False
    appended: Sequence[Appended] = ()
    refused: bool = False
    result: Any = None
    failed: Exception | None = None
    error: Exception | None = None


@dataclass
class GroupCommit:
    """The appends waiting for one catalog in this process, and whether one is committing now."""

    _waiting: list[_Ticket] = field(default_factory=list)
    _committing: bool = False
    _turn: threading.Condition = field(default_factory=threading.Condition)

    def append(self, append: Append, commit: Commit) -> Committed:
        """Append the events (in order, together) with whatever other threads bring meanwhile.
        Returns once they are committed or refused; raises what failed the transaction that held them."""
        ticket = _Ticket(append)
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
        return Committed(ticket.appended, batch, ticket.refused, ticket.result, ticket.failed)

    def _commit_waiting(self, commit: Commit) -> Sequence[Appended]:
        """Commit every waiting ticket as one transaction; called holding the condition, which is
        released while the transaction runs so that others can queue behind it. Where they went."""
        batch, self._waiting = self._waiting, []
        self._committing = True
        outcomes: Sequence[Outcome | None] = [Outcome(()) for _ in batch]
        error: Exception | None = None
        self._turn.release()
        try:
            answered = commit([ticket.append for ticket in batch])
            if len(answered) != len(batch):
                raise CustodyError(f"a ledger transaction answered for {len(answered)} of {len(batch)} appends")
            outcomes = answered
        # What the catalog raises: its CHECKPOINT_FAILURES (not imported: its module imports this one).
        except (CustodyError, SQLAlchemyError, OSError) as err:
            error = err
        except BaseException as err:
            error = CustodyError(f"the transaction that held these ledger entries failed: {type(err).__name__}")
            raise
        finally:
            self._turn.acquire()
            self._committing = False
            for ticket, outcome in zip(batch, outcomes, strict=True):
                ticket.done, ticket.error = True, error
                ticket.refused = outcome is None
                if outcome is not None:
                    ticket.appended, ticket.result, ticket.failed = outcome
            self._turn.notify_all()
        # A work's entries follow every entry of the batch's decisions.
        return sorted(
            (entry for ticket in batch if ticket.error is None for entry in ticket.appended), key=attrgetter("seq")
        )
