"""The slow-down after failed logins, kept so that a guesser cannot keep the user out.

Failed password checks are counted in a row per budget, and after FREE_FAILURES of them in a row each
next check from that budget waits (the base delay, doubling with each further failure, at most
DELAY_CAP_FACTOR times it); a refusal for coming too early checks nothing and counts nothing, and a
good password empties the budget. A client the user signed in from before (a browser or a `custody
login` that holds the device token the service gave it then) has a budget of its own; every other
client asking for that user shares one. A guesser, who holds none of the user's device tokens, only
ever spends the shared budget: the user's own browser still gets in at its first try. A first
sign-in from a new client waits like the guesser while the guessing lasts.

The counts are kept in the catalog, which every process shares, so the slow-down holds across the
CLI, the service's processes and the UI's login alike. Counts nobody added to for longer than
FORGOTTEN_AFTER are dropped: a guesser who waits that long between two guesses gets its free ones again.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import col, select

from governance.catalog import Catalog
from governance.catalog.models import LoginFailures

FREE_FAILURES = 3
DELAY_CAP_FACTOR = 64
FORGOTTEN_AFTER = timedelta(hours=1)


def user_budget(user: str) -> str:
    """The budget every client shares that asks for `user` without a device token of theirs."""
    return "user:" + hashlib.sha256(user.encode()).hexdigest()


def device_budget(device: str) -> str:
    """The budget of one client, by its device token's id."""
    return "device:" + hashlib.sha256(device.encode()).hexdigest()


def claim(catalog: Catalog, budget: str, base: float) -> float:
    """Seconds until a check from `budget` may be made; 0.0 when this one may, and it is then
    counted as a failure already, in the same transaction as the look at the count, so that checks
    made at once by several processes each count. `succeeded` empties the budget after a good
    password; `unclaimed` takes back a check that was not made."""
    now = datetime.now(UTC)
    with catalog.session() as session:
        row = session.exec(select(LoginFailures).where(LoginFailures.key == budget).with_for_update()).first()
        wait = _wait(row, base, now)
        if wait > 0:
            return wait
        insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
        counted = insert(LoginFailures).values(key=budget, failures=1, last_failure_at=now)
        session.execute(
            counted.on_conflict_do_update(
                index_elements=["key"], set_={"failures": col(LoginFailures.failures) + 1, "last_failure_at": now}
            )
        )
        session.execute(delete(LoginFailures).where(col(LoginFailures.last_failure_at) < now - FORGOTTEN_AFTER))
    return 0.0


def _wait(row: LoginFailures | None, base: float, now: datetime) -> float:
    if row is None or row.failures < FREE_FAILURES:
        return 0.0
    wait = min(base * 2 ** (row.failures - FREE_FAILURES), base * DELAY_CAP_FACTOR)
    last = row.last_failure_at if row.last_failure_at.tzinfo else row.last_failure_at.replace(tzinfo=UTC)
    return max(0.0, (last + timedelta(seconds=wait) - now).total_seconds())


def unclaimed(catalog: Catalog, budget: str) -> None:
    """Take back a claimed check that was not made (the directory could not be asked)."""
    with catalog.session() as session:
        session.execute(
            update(LoginFailures)
            .where(col(LoginFailures.key) == budget, col(LoginFailures.failures) > 0)
            .values(failures=col(LoginFailures.failures) - 1)
        )


def succeeded(catalog: Catalog, budget: str) -> None:
    """A good password empties the budget it was checked from."""
    with catalog.session() as session:
        session.execute(delete(LoginFailures).where(col(LoginFailures.key) == budget))


def device_reference(device: str) -> str:
    """What the ledger keeps of a device token's id: enough to tell a user's clients apart."""
    return device_budget(device).removeprefix("device:")[:16]
