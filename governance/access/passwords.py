"""Passwords of the file directory: argon2id hashes (argon2-cffi), and the delay after failed logins.

A file directory keeps one hash per user, never the password. A login that fails again and again
for one user waits longer each time, so a guesser gets few tries an hour while the user, once the
guessing stops, gets in after the delay; the failures are read from the ledger, which every process
writes, so the delay holds across the CLI, the service and the UI's login alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from governance.config import env_amount
from governance.errors import InvalidInput

HASH_PREFIX = "$argon2id$"
MIN_LENGTH = 8
MAX_LENGTH = 1024
# Failed logins in a row that cost nothing; after them, each failure doubles the wait, up to the cap.
FREE_FAILURES = 3
DEFAULT_DELAY_SECONDS = 1.0
DELAY_CAP_FACTOR = 64
DELAY_VARIABLE = "CUSTODY_LOGIN_DELAY_SECONDS"


@cache
def _hasher() -> PasswordHasher:
    return PasswordHasher()  # RFC 9106's second recommended profile: argon2id, 64 MiB, 3 passes


@cache
def _decoy() -> str:
    return _hasher().hash("a user with no password")


def hashed(password: str, user: str) -> str:
    """The hash kept for `user`'s new password; too short or too long a password is refused."""
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise InvalidInput(f"the password for {user} must have {MIN_LENGTH} to {MAX_LENGTH} characters")
    if password.strip() != password or "\n" in password:
        raise InvalidInput(f"the password for {user} may not begin or end with spaces or hold a line break")
    return _hasher().hash(password)


def matches(stored: str | None, password: str) -> bool:
    """Whether `password` is the one `stored` was made from. A user without a hash costs as much
    as one with, so the time taken does not tell who exists."""
    try:
        return _hasher().verify(stored or _decoy(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


def checked_hash(value: object, where: str) -> str:
    """A stored hash as the file gives it; anything but an argon2id hash is refused naming `where`."""
    if not isinstance(value, str) or not value.startswith(HASH_PREFIX):
        raise InvalidInput(
            f"{where}: expected an argon2id hash ({HASH_PREFIX}…); set passwords with `custody directory set-password`"
        )
    return value


@dataclass(frozen=True)
class Attempt:
    """A past login of one user, as the ledger has it."""

    at: datetime
    allowed: bool


def delay_base(environ: Mapping[str, str]) -> float:
    base = env_amount(environ, DELAY_VARIABLE, "seconds")
    return DEFAULT_DELAY_SECONDS if base is None else base


def wait_before_next(attempts: Sequence[Attempt], base: float, now: datetime) -> float:
    """Seconds until the next login may be checked, from the checked attempts, newest first:
    failures in a row beyond the free ones double the wait each. Attempts refused unchecked for
    coming too early are not among them, so a guesser cannot keep the user out beyond the cap."""
    failures = 0
    last_failure: datetime | None = None
    for attempt in attempts:
        if attempt.allowed:
            break
        failures += 1
        last_failure = last_failure or attempt.at
    if last_failure is None or failures < FREE_FAILURES:
        return 0.0
    wait = min(base * 2 ** (failures - FREE_FAILURES), base * DELAY_CAP_FACTOR)
    return max(0.0, (last_failure + timedelta(seconds=wait) - now).total_seconds())
