"""What every route of the service shares: Custody's catalog and policy, the sessions, and the
ledger entries of refused requests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from governance import ledger
from governance.access.guard import ANONYMOUS, ledger_actor, record
from governance.access.policy import Decision, Identity, Verb
from governance.api import Custody
from governance.catalog import closing_checkpoint
from governance.errors import shown
from governance.runs import Assurance
from governance.service.gateway import Gateway
from governance.service.sessions import Principal, Sessions

SESSION_COOKIE = "custody_session"
CSRF_COOKIE = "custody_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# A client refused again and again for the same reason (a tab left open past its session's end
# polls every few seconds) is recorded once a minute, not once a request.
REPEAT_SECONDS = 60.0


@dataclass
class Refusals:
    """When each (peer, reason) was last recorded."""

    seen: dict[tuple[str, str], float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def due(self, peer: str, reason: str) -> bool:
        now = time.monotonic()
        with self.lock:
            if now - self.seen.get((peer, reason), -REPEAT_SECONDS) < REPEAT_SECONDS:
                return False
            self.seen[(peer, reason)] = now
            return True


@dataclass
class Service:
    custody: Custody
    sessions: Sessions
    tokens: Sessions
    gateway: Gateway | None = None
    refusals: Refusals = field(default_factory=Refusals)

    def principal(self, connection: HTTPConnection) -> Principal:
        """Who the request is for: the user a trusted gateway names, else its session's. Raises
        UntrustedGateway or NotSignedIn."""
        vouched = self.gateway.principal(connection) if self.gateway is not None else None
        return vouched or self.sessions.find(connection.cookies.get(SESSION_COOKIE))

    def end(self, sessions: Sessions, principal: Principal, channel: str) -> None:
        """End a session or token for every copy of it, and record that it ended."""
        sessions.end(principal)
        details = {"channel": channel, "method": principal.method, "session": principal.reference}
        with closing_checkpoint(), self.custody.store.session() as session:
            ledger.append(
                session,
                actor=ledger_actor(principal.user),
                action=ledger.Action.SESSION_ENDED,
                assurance=Assurance.VERIFIED,
                details=details,
            )

    def refused(self, connection: HTTPConnection, reason: str, channel: str, user: str = ANONYMOUS) -> None:
        """Record a request refused before it reached anything: who, from where, to what, why."""
        peer = connection.client.host if connection.client else "unknown"
        if not self.refusals.due(peer, reason):
            return
        decision = Decision(Identity(user, Assurance.NONE), Verb.SESSION, None, False, reason)
        details = {"channel": channel, "peer": peer, "path": shown(connection.url.path, 200)}
        with closing_checkpoint():
            record(self.custody.store, decision, details=details)


def own_origin(connection: HTTPConnection) -> str:
    scheme = {"ws": "http", "wss": "https"}.get(connection.url.scheme, connection.url.scheme)
    return f"{scheme}://{connection.headers.get('host', '')}"


def cross_site(connection: HTTPConnection) -> str | None:
    """Why a request that may change something looks sent by a page of another site, or None. Every
    browser says where a POST or a WebSocket comes from (Origin, Sec-Fetch-Site); a client that is
    not a browser says neither and holds its own cookie."""
    if connection.scope["type"] == "http" and connection.scope["method"] in SAFE_METHODS:
        return None
    site = connection.headers.get("sec-fetch-site")
    if site in ("cross-site", "same-site"):
        return f"a request sent by a page of another site (Sec-Fetch-Site: {site}) is refused"
    origin = connection.headers.get("origin")
    if origin is not None and origin != own_origin(connection):
        return f"a request sent by a page of {shown(origin)} is refused: only this service's pages may send it"
    return None
