"""Passwords of the file directory: argon2id hashes (argon2-cffi), and the base of the delay after
failed logins (governance.access.throttle).

A file directory keeps one hash per user, never the password. A user it does not know is checked
against a decoy hash made with the parameters of the hashes it holds, so that the time a check takes
does not tell who exists.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import astuple
from functools import cache

from argon2 import PasswordHasher, extract_parameters
from argon2.exceptions import InvalidHashError, VerificationError

from governance.config import env_amount
from governance.errors import InvalidInput

HASH_PREFIX = "$argon2id$"
MIN_LENGTH = 8
MAX_LENGTH = 1024
DEFAULT_DELAY_SECONDS = 1.0
DELAY_VARIABLE = "CUSTODY_LOGIN_DELAY_SECONDS"


@cache
def _hasher() -> PasswordHasher:
    return PasswordHasher()  # RFC 9106's second recommended profile: argon2id, 64 MiB, 3 passes


@cache
def _decoy(like: str | None) -> str:
    """A hash of no one's password, made with the parameters of the hash `like`, else as new hashes are made."""
    hasher = PasswordHasher.from_parameters(extract_parameters(like)) if like is not None else _hasher()
    return hasher.hash("a user with no password")


def usual_hash(hashes: Iterable[str]) -> str | None:
    """One of `hashes` made with the parameters most of them were made with: what a decoy check
    costs the same as."""
    by_parameters = {astuple(extract_parameters(digest)): digest for digest in hashes}
    found = Counter(astuple(extract_parameters(digest)) for digest in hashes)
    return by_parameters[found.most_common(1)[0][0]] if found else None


def hashed(password: str, user: str) -> str:
    """The hash kept for `user`'s new password; too short or too long a password is refused."""
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise InvalidInput(f"the password for {user} must have {MIN_LENGTH} to {MAX_LENGTH} characters")
    if password.strip() != password or "\n" in password:
        raise InvalidInput(f"the password for {user} may not begin or end with spaces or hold a line break")
    return _hasher().hash(password)


def matches(stored: str | None, password: str, like: str | None = None) -> bool:
    """Whether `password` is the one `stored` was made from. A user without a hash is checked
    against a decoy made as the directory's usual hash `like` was, so that it costs as much as a
    user with one, and the time taken does not tell who exists."""
    try:
        return _hasher().verify(stored or _decoy(like), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


def checked_hash(value: object, where: str) -> str:
    """A stored hash as the file gives it; anything but an argon2id hash is refused naming `where`."""
    if not isinstance(value, str) or not value.startswith(HASH_PREFIX):
        raise InvalidInput(
            f"{where}: expected an argon2id hash ({HASH_PREFIX}…); set passwords with `custody directory set-password`"
        )
    return value


def delay_base(environ: Mapping[str, str]) -> float:
    base = env_amount(environ, DELAY_VARIABLE, "seconds")
    return DEFAULT_DELAY_SECONDS if base is None else base
