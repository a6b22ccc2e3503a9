"""What every route of the service shares: Custody's catalog and policy, the sessions, and the
ledger entries of refused requests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from anyio import CapacityLimiter, to_thread
from starlette.requests import HTTPConnection
from starlette.types import Message, Receive

from governance import ledger
from governance.access.guard import ANONYMOUS, ledger_actor, record_all
from governance.access.policy import Decision, Identity, Verb
from governance.api import Custody
from governance.errors import CrossSite, CustodyError, ServiceUnavailable, shown
from governance.runs import Assurance
from governance.service.devices import Devices
from governance.service.gateway import Gateway
from governance.service.recent import Recent
from governance.service.refusals import Refusals
from governance.service.sessions import Principal, Sessions
from governance.service.signins import SignIns
from governance.spec import SpecSet, folder_stamp, load_valid_specs

if TYPE_CHECKING:
    from governance.service.intake import Intake
    from governance.service.runs import RunDesk

SESSION_COOKIE = "custody_session"
CSRF_COOKIE = "custody_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The most a request may send, inflated if it came compressed: the UI's largest (a launch with its run
# config) stays far below, and so does an OpenLineage event of a large Spark plan.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Threads that decide a request and record the decision. They mostly wait for the ledger transaction
# that holds it, shared by every decision recorded at that moment: the more of them wait at once, the
# fewer transactions a busy service makes.
DECIDING_THREADS = 32
# How long the specs as read answer an engine's requests before their folder is looked at again.
SPECS_RECHECK_SECONDS = 1.0
# The most full ledger pages kept at once, each of at most 10,000 entries (the API's MAX_LEDGER_ENTRIES).
LEDGER_PAGES_KEPT = 8

T = TypeVar("T")


@dataclass
class Service:
    custody: Custody
    sessions: Sessions
    tokens: Sessions
    gateway: Gateway | None = None
    # Takes run requests: only a service that serves the Dagster UI has one.
    runs: RunDesk | None = None
    recent: Recent = field(default_factory=Recent)
    refusals: Refusals = field(init=False)
    # Made by the app as it starts, in its event loop: see `decided`.
    deciders: CapacityLimiter | None = None
    # Takes the OpenLineage endpoint's reports while the app runs.
    intake: Intake | None = None
    # The device tokens of clients their users signed in from (made with the sessions' key).
    devices: Devices | None = None
    # Checks the sign-ins' passwords: made by the app as it starts, in its event loop.
    signins: SignIns | None = None
    # Full pages of the ledger, kept apart: an auditor paging through it all would otherwise push
    # the catalog's and the lineages' answers out.
    ledger_pages: Recent = field(init=False)
    # The specs as last read, what their folder looked like then, and when it was last looked at.
    _specs: SpecSet | None = field(default=None, init=False)
    _specs_stamp: int = field(default=0, init=False)
    _specs_checked: float = field(default=0.0, init=False)
    _specs_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _specs_rechecking: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.ledger_pages = Recent(self.recent.seconds, LEDGER_PAGES_KEPT)
        self.refusals = Refusals(lambda decisions: record_all(self.custody.store, decisions))

    def specs(self, *, recent: bool = False) -> SpecSet:
        """The valid specs as their files are now: a decision follows an owner's edit without a
        restart, and a broken spec leaves the others decidable. `recent`: for the requests an
        engine makes by the thousand (a load, a listing, a signed read), as their files were about
        SPECS_RECHECK_SECONDS ago at most: once what was read is that old, a thread of its own
        looks at the folder (at thousands of specs, for longer than such a request takes) and
        reads the specs again if a file changed, while requests go on with what was read."""
        with self._specs_lock:
            kept = self._kept_specs() if recent else None
            if kept is not None:
                return kept
            return self._read_specs(folder_stamp(self.custody.settings.specs), time.monotonic())

    def specs_at_once(self) -> SpecSet | None:
        """The specs `specs(recent=True)` gives, when it would give them without waiting: None while
        they are read (or before they ever were)."""
        if not self._specs_lock.acquire(blocking=False):
            return None
        try:
            return self._kept_specs()
        finally:
            self._specs_lock.release()

    def _kept_specs(self) -> SpecSet | None:
        """The specs kept, if any; once they are SPECS_RECHECK_SECONDS old, a thread looks at the
        folder. Called with the specs' lock held."""
        kept = self._specs
        stale = kept is not None and time.monotonic() - self._specs_checked >= SPECS_RECHECK_SECONDS
        if stale and not self._specs_rechecking:
            self._specs_rechecking = True
            threading.Thread(target=self._recheck_specs, name="custody-specs", daemon=True).start()
        return kept

    def _recheck_specs(self) -> None:
        try:
            checked = time.monotonic()
            stamp = folder_stamp(self.custody.settings.specs)
            with self._specs_lock:
                if stamp == self._specs_stamp:
                    self._specs_checked = checked
                else:
                    self._read_specs(stamp, checked)
        finally:
            self._specs_rechecking = False

    def _read_specs(self, stamp: int, checked: float) -> SpecSet:
        settings = self.custody.settings
        read = load_valid_specs(settings.specs, settings.cache_dir, transform_packages=settings.transform_packages)
        self._specs, self._specs_stamp, self._specs_checked = read.specs, stamp, checked
        return read.specs

    def principal(self, connection: HTTPConnection) -> Principal:
        """Who the request is for: the user a trusted gateway names, else its session's. Raises
        UntrustedGateway or NotSignedIn."""
        vouched = self.gateway.principal(connection) if self.gateway is not None else None
        return vouched or self.sessions.find(connection.cookies.get(SESSION_COOKIE))

    def end(self, sessions: Sessions, principal: Principal, channel: str) -> None:
        """End a session or token for every copy of it, and record that it ended."""
        sessions.end(principal)
        details = {"channel": channel, "method": principal.method, "session": principal.reference}
        with self.custody.store.session() as session:
            ledger.append(
                session,
                actor=ledger_actor(principal.user),
                action=ledger.Action.SESSION_ENDED,
                assurance=Assurance.VERIFIED,
                details=details,
            )

    def refused(
        self, connection: HTTPConnection, err: CustodyError | str, channel: str, claimed: str | None = None
    ) -> None:
        """Record a request refused before it reached anything: from where, to what, why, and whom
        it claimed to be for (`claimed`, else the user a gateway's header names). A flood's repeats
        are counted (governance.service.refusals)."""
        if claimed is None and self.gateway is not None:
            claimed = connection.headers.get(self.gateway.header)
        decision = Decision(Identity(ANONYMOUS, Assurance.NONE), Verb.SESSION, None, False, str(err))
        details = {
            "channel": channel,
            "path": shown(connection.url.path, 200),
            **({"claimed": ledger_actor(claimed)} if claimed else {}),
        }
        self.refusals.refused(peer_of(connection), decision, details)

    def sign_ins(self) -> tuple[Devices, SignIns]:
        """The device tokens and the password checks of sign-ins, made as the app starts."""
        if self.devices is None or self.signins is None:
            raise ServiceUnavailable("the service has not started: try again in a moment")
        return self.devices, self.signins

    def refused_login(self, connection: HTTPConnection) -> Callable[[Decision, Mapping[str, Any]], None]:
        """Where a refused password check of a request is recorded: as the other refusals are."""
        peer = peer_of(connection)
        return lambda decision, details: self.refusals.refused(peer, decision, details)


def service_of(connection: HTTPConnection) -> Service:
    """The service a route of its app answers for."""
    service: Service = connection.app.state.service
    return service


async def decided(connection: HTTPConnection, decide: Callable[[], T]) -> T:
    """What `decide` returns, run on the service's deciding threads: a decision and its ledger entry,
    not other blocking work (a page to read, a lineage to compute), which the worker threads do
    (CUSTODY_SERVICE_THREADS) lest many threads slow each other down."""
    return await to_thread.run_sync(decide, limiter=service_of(connection).deciders)


async def whole_body(receive: Receive) -> bytes | None:
    """A request's whole body (the service bounds its size before it gets here); None when the
    client disconnected before it was whole."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for an app behind one that read the request's body: that body, then what the client sends."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def peer_of(connection: HTTPConnection) -> str:
    return connection.client.host if connection.client else "unknown"


def cross_site(connection: HTTPConnection) -> CrossSite | None:
    """Why a request looks sent by a page of another site, or None. A browser says where every
    request comes from (Sec-Fetch-Site), and where a POST or a WebSocket does (Origin); only a person
    following a link to a page (a top-level navigation) may come from elsewhere. A client that is not
    a browser says neither and holds its own cookie or token. The origin's host is compared, not its
    scheme: behind a gateway that ends TLS, the service itself is reached over plain HTTP."""
    navigation = connection.scope["type"] == "http" and connection.scope["method"] in SAFE_METHODS
    site = connection.headers.get("sec-fetch-site")
    if site in ("cross-site", "same-site") and not (
        navigation and connection.headers.get("sec-fetch-mode") == "navigate"
    ):
        return CrossSite(f"a request sent by a page of another site (Sec-Fetch-Site: {site}) is refused")
    origin = connection.headers.get("origin")
    if not navigation and origin is not None and urlsplit(origin).netloc != connection.headers.get("host", ""):
        return CrossSite(
            f"a request sent by a page of {shown(origin)} is refused: only this service's pages may send it"
        )
    return None


def first_problem(err: Exception) -> str:
    """The first problem of a request whose parameters or body do not fit a route, in one line."""
    from fastapi.exceptions import RequestValidationError

    problems = err.errors() if isinstance(err, RequestValidationError) else []
    first = problems[0] if problems else {"loc": (), "msg": str(err)}
    where = " ".join(str(part) for part in first["loc"])
    # Pydantic words a validator's own message "Value error, …": the message is the validator's.
    said = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {said}" if where else said
