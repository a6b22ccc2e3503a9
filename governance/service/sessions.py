"""Sessions of the service. A session is a random id with a row in the catalog that says whose it is,
how they proved it and until when; the browser holds the id signed with the service's key. Ending a
session marks its row, so a copied cookie stops working in every process that shares the catalog: at
once in the process that ended it, within CUSTODY_SESSION_RECHECK_SECONDS in the others."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from itsdangerous import BadData, URLSafeTimedSerializer
from sqlalchemy import delete
from sqlmodel import col

from governance.access.policy import Identity
from governance.catalog import Catalog
from governance.catalog.models import ServiceSession
from governance.envsecrets import read_secret
from governance.errors import InvalidInput, NotSignedIn
from governance.runs import Assurance

SECRET_VARIABLE = "CUSTODY_SESSION_SECRET"
LIFETIME_VARIABLE = "CUSTODY_SESSION_SECONDS"
TOKEN_LIFETIME_VARIABLE = "CUSTODY_TOKEN_SECONDS"
RECHECK_VARIABLE = "CUSTODY_SESSION_RECHECK_SECONDS"
DEFAULT_RECHECK_SECONDS = 10
DEFAULT_LIFETIME_SECONDS = 8 * 3600
DEFAULT_TOKEN_LIFETIME_SECONDS = 3600
SHORTEST_SECRET = 32
REFERENCE_LENGTH = 16
# The method of a user a trusted gateway names (governance.service.gateway).
GATEWAY_METHOD = "gateway"
# How long a session's row stays after it expired: an operator looking into a sign-in finds it.
KEPT_AFTER_EXPIRY = timedelta(days=1)
T = TypeVar("T")


@dataclass(frozen=True)
class Principal:
    """Who a request is for, and how they proved it: the directory's method and the session, by
    its key (`key_of` its id), never by the id a cookie or token carries."""

    user: str
    method: str
    session: str
    # How the request reached us: the UI (a browser's session) or the API (a token).
    channel: str = "ui"

    @property
    def reference(self) -> str:
        """What the ledger keeps of the session: enough to tell sessions apart."""
        return self.session[:REFERENCE_LENGTH]

    def identity(self) -> Identity:
        """The user, verified by the sign-in, as decisions name them."""
        return Identity(self.user, Assurance.VERIFIED, self.method, self.channel)

    def recorded(self) -> dict[str, str]:
        """What the ledger keeps of how a request of this sign-in reached us."""
        return {"channel": self.channel, "method": self.method, "session": self.reference}


def key_of(session_id: str) -> str:
    """What the catalog keys a session by: the SHA-256 of its id, which signs no cookie."""
    return hashlib.sha256(session_id.encode()).hexdigest()


def reference_of(session_id: str) -> str:
    """What the ledger keeps of the session `session_id` (see Principal.reference)."""
    return key_of(session_id)[:REFERENCE_LENGTH]


@dataclass(frozen=True)
class SessionSettings:
    """The key sessions are signed with and how long one lasts. Without CUSTODY_SESSION_SECRET the
    key is this process's own, so sessions end when the service stops and only one process serves."""

    secret: bytes
    lifetime: timedelta
    token_lifetime: timedelta = timedelta(seconds=DEFAULT_TOKEN_LIFETIME_SECONDS)
    # How long a process goes by what it last read of a session before reading its row again: a
    # logout in another process, or an open WebSocket's expiry, takes effect within this long.
    recheck: timedelta = timedelta(seconds=DEFAULT_RECHECK_SECONDS)

    def __repr__(self) -> str:
        return (
            f"SessionSettings(secret=***, lifetime={self.lifetime}, token_lifetime={self.token_lifetime}, "
            f"recheck={self.recheck})"
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> SessionSettings:
        secret = read_secret(environ, SECRET_VARIABLE)
        if secret is not None and len(secret) < SHORTEST_SECRET:
            raise InvalidInput(
                f"{SECRET_VARIABLE} is shorter than {SHORTEST_SECRET} characters: "
                "make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        key = secret.encode() if secret is not None else secrets.token_bytes(SHORTEST_SECRET)
        return cls(
            key,
            _seconds(environ, LIFETIME_VARIABLE, DEFAULT_LIFETIME_SECONDS),
            _seconds(environ, TOKEN_LIFETIME_VARIABLE, DEFAULT_TOKEN_LIFETIME_SECONDS),
            _seconds(environ, RECHECK_VARIABLE, DEFAULT_RECHECK_SECONDS),
        )


def _seconds(environ: Mapping[str, str], variable: str, default: int) -> timedelta:
    seconds = environ.get(variable, str(default))
    if not seconds.isdigit() or int(seconds) <= 0:
        raise InvalidInput(f"{variable}={seconds!r}: give a whole number of seconds, such as {default}")
    return timedelta(seconds=int(seconds))


@dataclass(frozen=True)
class _Seen:
    """A session as its row was read: whose, and until when it may be trusted without reading again."""

    principal: Principal
    expires_at: datetime
    until: float


class Sessions:
    """Opens, finds and ends the sessions of one kind (`session` for browsers, `token` for the API).
    A session found valid is taken as it was read for `recheck` seconds (never past its expiry), so
    that a busy client's every request is not a read of the catalog; ending it here forgets it at
    once."""

    def __init__(self, catalog: Catalog, settings: SessionSettings, kind: str = "session"):
        self.catalog = catalog
        self.kind = kind
        self.lifetime = settings.token_lifetime if kind == "token" else settings.lifetime
        self.recheck = settings.recheck.total_seconds()
        self._signer = URLSafeTimedSerializer(settings.secret, salt=f"custody-{kind}")
        # Both in the order their entries stop mattering: the oldest first, dropped as new ones come.
        self._seen: dict[str, _Seen] = {}
        # Sessions ended here, until the signed value could be valid no longer: never remembered
        # again, however a read that began before the end saw them.
        self._ended: dict[str, float] = {}
        # Signed values whose signature was found good, with the session id and the moment they
        # expire: checking a signature costs more than the rest of a kept answer.
        self._signatures: dict[str, tuple[str, float]] = {}
        self._seen_lock = threading.Lock()

    def open(self, session_id: str, user: str, method: str) -> tuple[Principal, str]:
        """Record `user`'s new session `session_id` (`new_session_id`); its principal, and the signed
        value its holder presents. The rows of sessions that expired over a day ago go, so that the
        table holds about a day's sign-ins."""
        principal = Principal(user, method, key_of(session_id), "api" if self.kind == "token" else "ui")
        issued = datetime.now(UTC)
        row = ServiceSession(
            id=principal.session,
            user=principal.user,
            method=principal.method,
            kind=self.kind,
            issued_at=issued,
            expires_at=issued + self.lifetime,
        )
        with self.catalog.session() as session:
            session.add(row)
            session.execute(delete(ServiceSession).where(col(ServiceSession.expires_at) < issued - KEPT_AFTER_EXPIRY))
        return principal, self._signer.dumps(session_id)

    def find(self, signed: str | None) -> Principal:
        """The principal of a valid session; NotSignedIn says why there is none."""
        key = self._key(signed)
        return self._remembered(key) or self._read(key)

    def remembered(self, signed: str | None) -> Principal | None:
        """The principal of a valid session as it was read a moment ago, without a read of the
        catalog; None when it must be read (`find`). NotSignedIn for a value this service did not sign."""
        return self._remembered(self._key(signed))

    def _key(self, signed: str | None) -> str:
        """The key of the session `signed` holds the id of."""
        if not signed:
            raise NotSignedIn("sign in first")
        checked = self._signatures.get(signed)
        if checked is not None and time.time() < checked[1]:
            return checked[0]
        try:
            session_id, signed_at = self._signer.loads(
                signed, max_age=int(self.lifetime.total_seconds()), return_timestamp=True
            )
        except BadData as err:
            raise NotSignedIn(f"this {self.kind} is expired or was not made by this service: sign in again") from err
        key = key_of(str(session_id))
        with self._seen_lock:
            self._signatures[signed] = (key, signed_at.timestamp() + self.lifetime.total_seconds())
            _drop_before(self._signatures, time.time(), lambda kept: kept[1])
        return key

    def _remembered(self, key: str) -> Principal | None:
        if key in self._ended:
            return None
        seen = self._seen.get(key)
        if seen is not None and time.monotonic() < seen.until and datetime.now(UTC) < seen.expires_at:
            return seen.principal
        return None

    def _read(self, key: str) -> Principal:
        with self.catalog.reading() as session:
            row = session.get(ServiceSession, key)
        if row is None or row.kind != self.kind:
            raise NotSignedIn(f"this {self.kind} is unknown to the catalog: sign in again")
        if row.ended_at is not None:
            raise NotSignedIn(f"this {self.kind} has ended: sign in again")
        if _aware(row.expires_at) <= datetime.now(UTC):
            raise NotSignedIn(f"this {self.kind} has expired: sign in again")
        principal = Principal(row.user, row.method, row.id, "api" if self.kind == "token" else "ui")
        self._remember(_Seen(principal, _aware(row.expires_at), time.monotonic() + self.recheck))
        return principal

    def _remember(self, seen: _Seen) -> None:
        key = seen.principal.session
        with self._seen_lock:
            if key in self._ended:
                return
            self._seen.pop(key, None)
            self._seen[key] = seen
            _drop_before(self._seen, time.monotonic(), lambda kept: kept.until)

    def end(self, principal: Principal) -> None:
        """End the session: at once in this process, in the catalog for every other one."""
        with self._seen_lock:
            now = time.monotonic()
            self._ended[principal.session] = now + self.lifetime.total_seconds()
            _drop_before(self._ended, now, lambda until: until)
            self._seen.pop(principal.session, None)
        with self.catalog.session() as session:
            row = session.get(ServiceSession, principal.session)
            if row is not None and row.ended_at is None:
                row.ended_at = datetime.now(UTC)
                session.add(row)


def ended(catalog: Catalog, principal: Principal) -> str | None:
    """Why the session or token `principal` was signed in by is over, as the catalog has it now;
    None while it lasts. A gateway's user has none: the gateway vouches for each request."""
    if principal.method == GATEWAY_METHOD:
        return None
    with catalog.reading() as session:
        row = session.get(ServiceSession, principal.session)
    if row is None:
        return f"the session of {principal.user} is unknown to the catalog"
    if row.ended_at is not None:
        return f"the session of {principal.user} has ended"
    if _aware(row.expires_at) <= datetime.now(UTC):
        return f"the session of {principal.user} has expired"
    return None


def _drop_before(entries: dict[str, T], now: float, until: Callable[[T], float]) -> None:
    """Drop the entries, oldest first, that stopped mattering before `now`."""
    while entries:
        oldest = next(iter(entries))
        if until(entries[oldest]) > now:
            return
        del entries[oldest]


def new_session_id() -> str:
    return secrets.token_urlsafe(24)


def _aware(moment: datetime) -> datetime:
    """SQLite gives back a stored time without its zone; the catalog stores UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
