"""The password checks of the service's sign-ins (the UI's login, the API's tokens), each on a thread
of a few of their own, so that a flood of sign-ins takes no more than those threads and leaves the
API's answers theirs. Clients the user signed in from before (governance.service.devices) are
checked on threads apart from everyone else's, so that a flood of guesses never queues before them,
and one at a time for each user, so that no user's own sign-ins, however many, queue before another
user's; a sign-in that finds too many before it is refused at once rather than kept waiting."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from anyio import CapacityLimiter, to_thread

from governance.errors import ServiceUnavailable

# A check (a password hash, or a bind to LDAP) keeps a core busy: one at a time for each kind of
# client leaves the other core to the API.
THREADS = 1
# The sign-ins that may wait for a thread, of each kind, before more are refused.
WAITING = 16
T = TypeVar("T")


@dataclass
class _Lane:
    limiter: CapacityLimiter
    waiting: int = 0
    # The users whose sign-in is being checked or waits, in a lane that takes one of each at a time.
    users: set[str] = field(default_factory=set)


@dataclass
class SignIns:
    """Made in the event loop that serves (its limiters belong to it)."""

    known: _Lane = field(default_factory=lambda: _Lane(CapacityLimiter(THREADS)))
    others: _Lane = field(default_factory=lambda: _Lane(CapacityLimiter(THREADS)))

    async def check(self, user: str, known: bool, check: Callable[[], T]) -> T:
        """`check()` for a sign-in of `user`, on the threads of known clients' sign-ins (one of each
        user's at a time) or of everyone else's."""
        lane = self.known if known else self.others
        if lane.waiting >= WAITING:
            raise ServiceUnavailable("too many sign-ins are being checked at once: try again in a moment")
        if known and user in lane.users:
            raise ServiceUnavailable(f"a sign-in of {user} is being checked already: try again in a moment")
        lane.waiting += 1
        if known:
            lane.users.add(user)
        try:
            return await to_thread.run_sync(check, limiter=lane.limiter)
        finally:
            lane.waiting -= 1
            lane.users.discard(user)
