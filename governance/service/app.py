"""The service's ASGI app: the login, and the Dagster UI behind its gate when one is given."""

from __future__ import annotations

import gc
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from anyio import CapacityLimiter, to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from governance.api import Custody
from governance.catalog.api import CHECKPOINT_FAILURES
from governance.config import env_count
from governance.errors import (
    AccessDenied,
    CatalogReadOnly,
    CatalogUnavailable,
    CustodyError,
    InvalidInput,
    NotFound,
    NotSignedIn,
    RequestTooLarge,
    ServiceUnavailable,
    SettingsChanged,
    error_summary,
)
from governance.lake.engines import ICEBERG_PATH
from governance.lineage.resident import keep_resident, load
from governance.service import api, changes, foreign_runs, lineage, login, oauth, openlineage, specs
from governance.service import runs as runs_api
from governance.service import settings as settings_api
from governance.service import streams as streams_api
from governance.service import tables as tables_api
from governance.service.context import DECIDING_THREADS, MAX_BODY_BYTES, Service, first_problem
from governance.service.devices import Devices
from governance.service.gate import Gate
from governance.service.gateway import Gateway
from governance.service.iceberg.routes import create_iceberg_app
from governance.service.intake import Intake
from governance.service.middleware import JsonBodies, Unframed, refusal
from governance.service.principal import UiKeys
from governance.service.recent import Recent
from governance.service.refusals import WINDOW_SECONDS, Flusher
from governance.service.runs import RunDesk
from governance.service.sessions import Sessions, SessionSettings
from governance.service.signins import SignIns

# How long a thread that wants the interpreter waits for the one holding it before asking it to let
# go (Python's default: 5 ms): a request the event loop answers waits no longer than this behind the
# Python work of a sign-in checked meanwhile.
SWITCH_SECONDS = 0.001
THREADS_VARIABLE = "CUSTODY_SERVICE_THREADS"
API_THREADS = 4


def create_app(
    custody: Custody,
    settings: SessionSettings,
    ui: ASGIApp | None = None,
    gateway: Gateway | None = None,
    runs: RunDesk | None = None,
    recent: Recent | None = None,
    threads: int | None = None,
    ui_keys: UiKeys | None = None,
    refusals_window: float = WINDOW_SECONDS,
) -> ASGIApp:
    """The service's app. `threads`: how many worker threads answer blocking work in the serving
    process (see `api_threads`); None leaves Starlette's default. `ui_keys`: what the gate signs the
    principal with for a `ui` served by another process. `refusals_window`: how long the repeats of a
    kind of refused request are counted before they are recorded (governance.service.refusals)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if threads is not None:
            to_thread.current_default_thread_limiter().total_tokens = threads
        sys.setswitchinterval(SWITCH_SECONDS)
        service = app.state.service
        service.deciders = CapacityLimiter(DECIDING_THREADS)
        service.signins = SignIns()
        flusher = Flusher(service.refusals)
        flusher.start()
        service.intake = Intake(custody, service.specs)
        service.intake.start()
        # Lineage walks come from memory from here on: a long-lived process reads the edges once,
        # beside its first requests rather than in the first walk's.
        keep_resident(custody.store.engine)
        loading = threading.Thread(target=load_lineage, args=(custody,), name="custody-lineage-load", daemon=True)
        loading.start()
        # What the process holds once it has started (its modules, the app, the policy, the specs)
        # lives about as long as it does: out of the collector's way, a full collection no longer
        # walks all of it in the middle of a request.
        service.specs()
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            service.intake.stop()
            flusher.stop()

    app = FastAPI(
        lifespan=lifespan,
        title="Custody",
        summary="Governed data assets: the catalog, versions, lineage, the ledger and rows, for signed-in users.",
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.service = Service(
        custody,
        Sessions(custody.store, settings),
        Sessions(custody.store, settings, "token"),
        gateway,
        runs,
        recent or Recent(),
        devices=Devices(settings.secret),
    )
    app.state.service.refusals.window = refusals_window
    # Routes are matched in order, and the busiest (other tools' lineage reports, the catalog,
    # lineage, the ledger) go first; the column lineage's paths go before the API's own, being more
    # precise than a version's direction.
    # The lake's Iceberg catalog first: engines ask it by the thousand a second (a signed read each),
    # and its one prefix is told apart at once, before the API's routes are tried one by one.
    app.mount(ICEBERG_PATH, create_iceberg_app(app.state.service))
    for routes in (
        openlineage,
        lineage,
        foreign_runs,
        api,
        oauth,
        login,
        changes,
        specs,
        settings_api,
        tables_api,
        runs_api,
        streams_api,
    ):
        app.include_router(routes.router)
    app.include_router(api.unknown)  # last: it answers paths the API does not have
    app.add_exception_handler(CustodyError, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    if ui is not None:
        app.mount("/", Gate(ui, app.state.service, ui_keys))
    # OAuth 2.0's token endpoints take the form RFC 6749 has; they act on no one's standing session
    # (the client's credentials are in the request), so a page of another site gains nothing by them.
    app.add_middleware(JsonBodies, prefix=api.router.prefix, forms=(f"{api.router.prefix}{oauth.PATH}",))
    app.add_middleware(
        JsonBodies, prefix=ICEBERG_PATH, taker="the Iceberg catalog", forms=(f"{ICEBERG_PATH}/v1{oauth.PATH}",)
    )
    app.add_middleware(Unframed)  # the last added is the outermost: a refusal of the one above too
    return BoundedBody(openlineage.Express(app, refused), MAX_BODY_BYTES)


def load_lineage(custody: Custody) -> None:
    """Load the lineage the process holds. A catalog that cannot be read now is told in one line on
    stderr; the first walk then tries again and answers with what it finds."""
    try:
        with custody.store.reading() as session:
            load(session)
    except CHECKPOINT_FAILURES as err:  # reading retries a checkpoint first, which may fail
        print(
            f"warning: the lineage was not loaded as the service started ({error_summary(err)}); its first walk loads it",
            file=sys.stderr,
        )


def api_threads(environ: Mapping[str, str], ui: bool) -> int | None:
    """How many worker threads answer in one process: CUSTODY_SERVICE_THREADS, else 4 for the API
    alone. They share one interpreter: more of them answer a busy service no faster, and its slowest
    requests later. The Dagster UI runs each GraphQL query on one of them, so a service with the UI
    keeps Starlette's 40 unless told otherwise."""
    threads = env_count(environ, THREADS_VARIABLE, "threads")
    return threads if threads is not None or ui else API_THREADS


# The status each kind of refusal answers with, the first that matches; anything else is 500.
STATUS: tuple[tuple[type[CustodyError], int], ...] = (
    (RequestTooLarge, 413),
    (NotSignedIn, 401),
    (AccessDenied, 403),
    (NotFound, 404),
    (InvalidInput, 400),
    (CatalogUnavailable, 503),
    (CatalogReadOnly, 503),
    (SettingsChanged, 503),
    (ServiceUnavailable, 503),
)


async def refused(request: Request, err: Exception) -> Response:
    """A Custody error as the API answers it: its status and its one message."""
    status = next((code for kind, code in STATUS if isinstance(err, kind)), 500)
    detail = str(err).removeprefix("denied: ")
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def invalid(request: Request, err: Exception) -> Response:
    """A request whose parameters or body do not fit the API: the first problem, in one line."""
    return JSONResponse({"detail": first_problem(err)}, status_code=400)


class BoundedBody:
    """Refuses a request whose body is larger than `limit` bytes with 413, before the app reads it
    when Content-Length says so, else as soon as the bytes received pass it."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await self._too_large(scope, receive, send)
            return
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise RequestTooLarge(str(received))
            return message

        try:
            await self.app(scope, bounded, send)
        except RequestTooLarge:
            await self._too_large(scope, receive, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request's body is larger than the {self.limit // 1024 // 1024} MiB a request may send"
        await refusal(scope, detail, 413)(scope, receive, send)
