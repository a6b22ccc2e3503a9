"""A Dagster webserver served on its own (`dg dev`, `dagster-webserver`), reached over HTTP: what the
gate lets through, a page, a GraphQL request or a WebSocket, is passed on to the very path the gate
decided on, with the principal the gate signed and none of the service's own credentials, and the
webserver's answer streamed back."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit

import httpx
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidURI, WebSocketException

from governance.errors import InvalidInput
from governance.service.context import whole_body

# Headers of one hop, which a proxy does not pass on (RFC 9110, 7.6.1).
HOP = frozenset(
    b"connection keep-alive proxy-authenticate proxy-authorization te trailer transfer-encoding upgrade "
    b"host content-length".split()
)
# The service's own credentials stay with it: the session cookie and the API's token. And what a
# client says of where it came from: the webserver would take it from the service, its proxy.
WITHHELD = frozenset(b"cookie authorization forwarded x-forwarded-for x-forwarded-proto x-forwarded-host".split())
# What a WebSocket's handshake makes anew on the next hop.
HANDSHAKE = frozenset(
    b"sec-websocket-key sec-websocket-version sec-websocket-extensions sec-websocket-protocol sec-websocket-accept".split()
)
# What the service's own server says of every answer: the webserver's would come twice.
ANSWERED = frozenset({b"date", b"server"})
CONNECT_SECONDS = 10
# The webserver answers a GraphQL query when it has: a long one is no reason to give up.
ANSWER_SECONDS = 300
# Dagster's own server takes WebSocket messages up to uvicorn's default, 16 MiB.
MESSAGE_BYTES = 1 << 24
# A WebSocket ended without a code, or by a lost connection (1005, 1006), is closed on the other
# side as a normal closure: those two are never sent.
UNSENDABLE = frozenset({1004, 1005, 1006, 1015})
NORMAL, FAILED = 1000, 1011


class Upstream:
    """The ASGI app that passes requests on to the webserver at `url`."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"--dagster-url: {url!r} is no http:// or https:// address of a Dagster webserver")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise InvalidInput("--dagster-url: give the webserver's address alone, with no user, password or query")
        self.url = url.rstrip("/")
        self.prefix = parts.path.rstrip("/").encode()  # a webserver served under a path (`--path-prefix`)
        self.sockets = ("wss" if parts.scheme == "https" else "ws") + self.url.removeprefix(parts.scheme)
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        # Made on first use, in the event loop that serves.
        if self._client is None:
            timeout = httpx.Timeout(ANSWER_SECONDS, connect=CONNECT_SECONDS)
            # Reached directly: a proxy the environment names is for the way out, not to this webserver.
            self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False)
        return self._client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _target(scope)
        if target is None:
            refused = JSONResponse(
                {"detail": "the path must begin with one / and hold no . or .. segment"}, status_code=400
            )
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(refused)
            else:
                await refused(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send, target)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send, target)

    async def _http(self, scope: Scope, receive: Receive, send: Send, target: bytes) -> None:
        body = await whole_body(receive)
        if body is None:  # the client left before it had sent the whole request: nothing to pass on
            return
        # The path as it came, its bytes kept: the one the gate decided on.
        url = httpx.URL(self.url).copy_with(raw_path=self.prefix + target)
        request = self.client.build_request(scope["method"], url, headers=_passed(scope, HOP | WITHHELD), content=body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as err:
            await self._unreachable(err)(scope, receive, send)
            return
        try:
            kept = [(name, value) for name, value in response.headers.raw if name.lower() not in HOP | ANSWERED]
            await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _websocket(self, scope: Scope, receive: Receive, send: Send, target: bytes) -> None:
        browser = WebSocket(scope, receive, send)
        try:
            upstream = await connect(
                self.sockets + target.decode("latin-1"),
                additional_headers=[
                    (n.decode("latin-1"), v.decode("latin-1")) for n, v in _passed(scope, HOP | HANDSHAKE | WITHHELD)
                ],
                subprotocols=scope.get("subprotocols") or None,
                open_timeout=CONNECT_SECONDS,
                max_size=MESSAGE_BYTES,
                compression=None,
                proxy=None,
                user_agent_header=None,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as err:
            await browser.send_denial_response(self._unreachable(err))
            return
        async with upstream:
            await browser.accept(subprotocol=upstream.subprotocol)
            pumps = [asyncio.ensure_future(_onward(browser, upstream)), asyncio.ensure_future(_back(upstream, browser))]
            try:
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pump in pumps:
                    pump.cancel()
                # Each pump's end is its own: one that failed has closed its side, and is not raised again.
                await asyncio.gather(*pumps, return_exceptions=True)

    def _unreachable(self, err: Exception) -> JSONResponse:
        said = str(err) or type(err).__name__
        return JSONResponse({"detail": f"Dagster's webserver at {self.url} did not answer: {said}"}, status_code=502)


def _target(scope: Scope) -> bytes | None:
    """The request's path and query as the client sent them; None for one that does not begin with
    a single `/` (the webserver's address could read it as another host) or holds a `.` or `..`
    segment (the next hop would resolve it to another path than the one the gate decided on;
    browsers resolve them before they send)."""
    path = scope.get("raw_path") or scope["path"].encode()
    if not path.startswith(b"/") or path.startswith(b"//") or {b".", b".."} & set(path.split(b"/")):
        return None
    query = scope.get("query_string", b"")
    return path + (b"?" + query if query else b"")


def _passed(scope: Scope, dropped: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in scope["headers"] if name.lower() not in dropped]


def _sendable(code: int | None) -> int:
    return NORMAL if code is None or code in UNSENDABLE else code


async def _onward(browser: WebSocket, upstream: ClientConnection) -> None:
    """The browser's messages to the webserver, until the browser leaves; the webserver's side is
    then closed with the browser's code."""
    try:
        while True:
            message = await browser.receive()
            if message["type"] == "websocket.disconnect":
                await upstream.close(_sendable(message.get("code")))
                return
            await upstream.send(message["text"] if message.get("text") is not None else message.get("bytes", b""))
    except WebSocketException:
        with contextlib.suppress(RuntimeError):
            await browser.close(FAILED)


async def _back(upstream: ClientConnection, browser: WebSocket) -> None:
    """The webserver's messages to the browser, until the webserver closes; the browser's side is
    then closed with the webserver's code, or as failed when the webserver went away."""
    code = FAILED
    try:
        async for message in upstream:
            if isinstance(message, str):
                await browser.send_text(message)
            else:
                await browser.send_bytes(message)
        code = _sendable(upstream.close_code)
    except WebSocketDisconnect:
        return
    except WebSocketException:
        code = FAILED
    with contextlib.suppress(RuntimeError):
        await browser.close(code)
