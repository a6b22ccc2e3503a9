"""Passwords of the file directory: argon2id hashes (argon2-cffi), and the base of the delay after
failed logins (governance.access.throttle).

A file directory keeps one hash per user, never the password. A user it does not know is checked
against a decoy hash made with the parameters of the hashes it holds, so that the time a check takes
does not tell who exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import astuple
from functools import cache

from argon2 import Parameters, PasswordHasher, extract_parameters
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


def _decoy(parameters: Parameters | None) -> str:
    """A hash of no one's password, made with `parameters`, else as new hashes are made: one for
    each set of parameters, kept."""
    key = astuple(parameters) if parameters is not None else ()
    if key not in _DECOYS:
        hasher = PasswordHasher.from_parameters(parameters) if parameters is not None else _hasher()
        _DECOYS.setdefault(key, hasher.hash("a user with no password"))
    return _DECOYS[key]


_DECOYS: dict[tuple[object, ...], str] = {}


def usual_parameters(hashes: Iterable[str]) -> Parameters | None:
    """The parameters most of `hashes` were made with, their decoy made already: what a check of
    a user with no hash costs the same as."""
    found: dict[tuple[object, ...], tuple[int, Parameters]] = {}
    for digest in hashes:
        parameters = extract_parameters(digest)
        count, _ = found.get(astuple(parameters), (0, parameters))
        found[astuple(parameters)] = (count + 1, parameters)
    if not found:
        return None
    _, usual = max(found.values(), key=lambda counted: counted[0])
    _decoy(usual)
    return usual


def hashed(password: str, user: str) -> str:
    """The hash kept for `user`'s new password; too short or too long a password is refused."""
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise InvalidInput(f"the password for {user} must have {MIN_LENGTH} to {MAX_LENGTH} characters")
    if password.strip() != password or "\n" in password:
        raise InvalidInput(f"the password for {user} may not begin or end with spaces or hold a line break")
    return _hasher().hash(password)


def matches(stored: str | None, password: str, usual: Parameters | None = None) -> bool:
    """Whether `password` is the one `stored` was made from. A user without a hash is checked
    against a decoy made with the `usual` parameters of the directory's hashes, so that it costs as
    much as a user with one, and the time taken does not tell who exists."""
    try:
        return _hasher().verify(stored or _decoy(usual), password) and stored is not None
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
