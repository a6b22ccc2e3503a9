"""A Dagster webserver served on its own (`dg dev`, `dagster-webserver`), reached over HTTP: what the
gate lets through, a page, a GraphQL request or a WebSocket, is passed on as it came, with the
principal the gate signed, and the webserver's answer streamed back."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httpx
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from governance.errors import InvalidInput

# Headers of one hop, which a proxy does not pass on (RFC 9110, 7.6.1), and those a WebSocket's
# handshake makes anew on the next hop.
HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization te trailer transfer-encoding upgrade "
    b"host content-length".split()
)
# The service's own credentials: the session cookie and the API's token stay with the service.
CREDENTIALS = frozenset({b"cookie", b"authorization"})
HANDSHAKE = frozenset(
    b"sec-websocket-key sec-websocket-version sec-websocket-extensions sec-websocket-protocol sec-websocket-accept".split()
)
CONNECT_SECONDS = 10
# The webserver answers a GraphQL query when it has: a long one is no reason to give up.
ANSWER_SECONDS = 300
# Dagster's own server takes WebSocket messages up to uvicorn's default, 16 MiB.
MESSAGE_BYTES = 1 << 24


class Upstream:
    """The ASGI app that passes requests on to the webserver at `url`."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"--dagster-url: {url!r} is no http:// or https:// address of a Dagster webserver")
        self.url = url.rstrip("/")
        self.sockets = ("wss" if parts.scheme == "https" else "ws") + self.url.removeprefix(parts.scheme)
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        # Made on first use, in the event loop that serves.
        if self._client is None:
            timeout = httpx.Timeout(ANSWER_SECONDS, connect=CONNECT_SECONDS)
            # Reached directly: a proxy the environment names is for the way out, not to this webserver.
            self._client = httpx.AsyncClient(
                base_url=self.url, timeout=timeout, follow_redirects=False, trust_env=False
            )
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive)
        request = self.client.build_request(
            scope["method"], _target(scope), headers=_passed(scope, HOP | CREDENTIALS), content=body
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as err:
            await self._unreachable(err)(scope, receive, send)
            return
        try:
            headers = [(name, value) for name, value in response.headers.raw if name.lower() not in HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = WebSocket(scope, receive, send)
        try:
            upstream = await connect(
                self.sockets + _target(scope),
                additional_headers=[
                    (n.decode("latin-1"), v.decode("latin-1")) for n, v in _passed(scope, HOP | HANDSHAKE | CREDENTIALS)
                ],
                subprotocols=scope.get("subprotocols") or None,
                open_timeout=CONNECT_SECONDS,
                max_size=MESSAGE_BYTES,
                compression=None,
                proxy=None,
                user_agent_header=None,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as err:
            await client.send_denial_response(self._unreachable(err))
            return
        async with upstream:
            await client.accept(subprotocol=upstream.subprotocol)
            onward = asyncio.ensure_future(_onward(client, upstream))
            back = asyncio.ensure_future(_back(upstream, client))
            done, pending = await asyncio.wait({onward, back}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            for task in done:
                task.result()

    def _unreachable(self, err: Exception) -> JSONResponse:
        said = str(err) or type(err).__name__
        return JSONResponse({"detail": f"Dagster's webserver at {self.url} did not answer: {said}"}, status_code=502)


async def _body(receive: Receive) -> bytes:
    """The request's whole body: the service bounds its size before it gets here."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def _target(scope: Scope) -> str:
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string", b"")
    return (path + (b"?" + query if query else b"")).decode("latin-1")


def _passed(scope: Scope, dropped: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in scope["headers"] if name.lower() not in dropped]


async def _onward(client: WebSocket, upstream: ClientConnection) -> None:
    """The browser's messages to the webserver, until the browser leaves."""
    try:
        while True:
            message = await client.receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(message.get("code", 1000))
                return
            await upstream.send(message["text"] if message.get("text") is not None else message.get("bytes", b""))
    except ConnectionClosed:
        return


async def _back(upstream: ClientConnection, client: WebSocket) -> None:
    """The webserver's messages to the browser, until the webserver closes."""
    try:
        async for message in upstream:
            if isinstance(message, str):
                await client.send_text(message)
            else:
                await client.send_bytes(message)
    except (ConnectionClosed, WebSocketDisconnect):
        return
    await client.close(upstream.close_code or 1000)
