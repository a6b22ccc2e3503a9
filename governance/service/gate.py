"""The gate in front of the Dagster UI: every page, GraphQL request and WebSocket needs a valid
session, or a trusted gateway's word for its user. A request that has one reaches the UI with its
principal in a header only this process can sign; any such header a client sent, and the gateway's
own headers, are dropped first."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from governance.errors import NotSignedIn, UntrustedGateway
from governance.service.context import Service, cross_site
from governance.service.principal import PRINCIPAL_HEADER, signed_principal

UI_CHANNEL = "ui"


class Gate:
    def __init__(self, app: ASGIApp, service: Service):
        self.app = app
        self.service = service
        gateway = service.gateway.strips() if service.gateway is not None else frozenset()
        self.dropped = {PRINCIPAL_HEADER.encode(), *gateway}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        refusal = await run_in_threadpool(self._refusal, connection)
        if isinstance(refusal, Response):
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(refusal)
            else:
                await refusal(scope, receive, send)
            return
        headers = [(name, value) for name, value in scope["headers"] if name.lower() not in self.dropped]
        headers.append((PRINCIPAL_HEADER.encode(), refusal.encode()))
        await self.app({**scope, "headers": headers}, receive, send)

    def _refusal(self, connection: HTTPConnection) -> Response | str:
        """The response that refuses the request, or the signed principal to pass on."""
        reason = cross_site(connection)
        if reason is not None:
            self.service.refused(connection, reason, UI_CHANNEL)
            return JSONResponse({"detail": reason}, status_code=403)
        try:
            principal = self.service.principal(connection)
        except UntrustedGateway as err:
            self.service.refused(connection, str(err), UI_CHANNEL)
            return JSONResponse({"detail": str(err)}, status_code=403)
        except NotSignedIn as err:
            if _a_page(connection):  # a person opening the UI: to the login, and back here after it
                wanted = connection.url.path + (f"?{connection.url.query}" if connection.url.query else "")
                return RedirectResponse(f"/login?next={quote(wanted)}", status_code=303)
            self.service.refused(connection, str(err), UI_CHANNEL)
            return JSONResponse({"detail": str(err)}, status_code=401, headers={"WWW-Authenticate": "Cookie"})
        return signed_principal(principal)


def _a_page(connection: HTTPConnection) -> bool:
    return (
        connection.scope["type"] == "http"
        and connection.scope["method"] in ("GET", "HEAD")
        and "text/html" in connection.headers.get("accept", "")
    )
