"""The gate in front of the Dagster UI: every page, GraphQL request and WebSocket needs a valid
session, or a trusted gateway's word for its user. A request that has one reaches the UI with its
principal in a header only this process can sign; any such header a client sent, and the gateway's
own headers, are dropped first. An open WebSocket is checked again as it streams, so it ends with
its session."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from governance.errors import AccessDenied, NotSignedIn
from governance.service.context import Service, cross_site
from governance.service.principal import PRINCIPAL_HEADER, UiKeys, signed_principal
from governance.service.sessions import Principal

UI_CHANNEL = "ui"
ENDED = 4401  # the close code of a socket whose session ended


class Gate:
    def __init__(self, app: ASGIApp, service: Service, keys: UiKeys | None = None):
        self.app = app
        self.service = service
        self.keys = keys
        gateway = service.gateway.strips() if service.gateway is not None else frozenset()
        self.dropped = {PRINCIPAL_HEADER.encode(), *gateway}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        decided = await run_in_threadpool(self._decide, connection)
        if isinstance(decided, Response):
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(decided)
            else:
                await decided(scope, receive, send)
            return
        headers = [(name, value) for name, value in scope["headers"] if name.lower() not in self.dropped]
        headers.append((PRINCIPAL_HEADER.encode(), signed_principal(decided, self.keys).encode()))
        if scope["type"] == "websocket" and decided.method != "gateway":
            send = self._ending_with_session(connection, decided, send)
        await self.app({**scope, "headers": headers}, receive, send)

    def _decide(self, connection: HTTPConnection) -> Response | Principal:
        """The response that refuses the request, or the principal to pass on."""
        refusal = cross_site(connection) or _graphql_by_get(connection)
        if refusal is not None:
            self.service.refused(connection, refusal, UI_CHANNEL)
            return JSONResponse({"detail": str(refusal)}, status_code=403 if isinstance(refusal, AccessDenied) else 405)
        try:
            return self.service.principal(connection)
        except NotSignedIn as err:
            if _a_page(connection):  # a person opening the UI: to the login, and back here after it
                wanted = connection.url.path + (f"?{connection.url.query}" if connection.url.query else "")
                return RedirectResponse(f"/login?next={quote(wanted)}", status_code=303)
            self.service.refused(connection, err, UI_CHANNEL)
            return JSONResponse({"detail": str(err)}, status_code=401, headers={"WWW-Authenticate": "Cookie"})
        except AccessDenied as err:  # a gateway's header from elsewhere than the gateway
            self.service.refused(connection, err, UI_CHANNEL)
            return JSONResponse({"detail": str(err)}, status_code=403)

    def _ending_with_session(self, connection: HTTPConnection, principal: Principal, send: Send) -> Send:
        """`send` for a WebSocket that closes it, instead of sending, once its session has ended."""
        checked = time.monotonic()
        closed = False

        async def sending(message: Message) -> None:
            nonlocal checked, closed
            if closed:
                return
            if message["type"] == "websocket.send" and time.monotonic() - checked > self.service.sessions.recheck:
                checked = time.monotonic()
                try:
                    await run_in_threadpool(self.service.principal, connection)
                except NotSignedIn:
                    closed = True
                    await send({"type": "websocket.close", "code": ENDED, "reason": "the session has ended"})
                    return
            await send(message)

        return sending


def _graphql_by_get(connection: HTTPConnection) -> str | None:
    """Dagster's GraphQL answers a GET with a query too, mutations included, which a link or an
    image on another page could send; its UI asks with POST, so a GET asks only for its page."""
    asks = connection.scope["type"] == "http" and connection.scope["method"] != "POST"
    if asks and connection.url.path.rstrip("/").endswith("/graphql") and "query" in parse_qs(connection.url.query):
        return "GraphQL is asked with POST: a GET with a query is refused"
    return None


def _a_page(connection: HTTPConnection) -> bool:
    return (
        connection.scope["type"] == "http"
        and connection.scope["method"] in ("GET", "HEAD")
        and "text/html" in connection.headers.get("accept", "")
    )
