"""The gate in front of the Dagster UI: every page, GraphQL request and WebSocket needs a valid
session, or a trusted gateway's word for its user. A request that has one reaches the UI with its
principal in a header only this process can sign, for that request alone; any such header a client
sent, and the gateway's own headers, are dropped first. What a GraphQL request asks Dagster to change
is decided here (governance.service.mutations). An open WebSocket is checked again as it streams, so
it ends with its session."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from governance.access.guard import enforce_all, launcher_of, record
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.errors import AccessDenied, InvalidInput, NotSignedIn, shown
from governance.service.context import SAFE_METHODS, Service, cross_site, replaying, whole_body
from governance.service.controls import instigator
from governance.service.mutations import STOPS, Asked, GraphQLRequest, backfill_ids, read
from governance.service.principal import PRINCIPAL_HEADER, UiKeys, signed_principal
from governance.service.sessions import GATEWAY_METHOD, Principal

UI_CHANNEL = "ui"
ENDED = 4401  # the close code of a socket whose session ended
# What the gate writes anew for the GraphQL request it passes on.
REWRITTEN = frozenset({b"content-type", b"content-length", b"content-encoding", b"transfer-encoding"})


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
        if scope["type"] == "websocket":
            await self._websocket(connection, decided, {**scope, "headers": headers}, receive, send)
        else:
            await self._http(connection, decided, {**scope, "headers": headers}, receive, send)

    async def _websocket(
        self, connection: HTTPConnection, principal: Principal, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A WebSocket, passed on with its principal signed, closed once its session ends."""
        if principal.method != GATEWAY_METHOD:
            send = self._ending_with_session(connection, principal, send)
        signed = signed_principal(principal, self.keys, method="GET", body=b"")
        await self.app(
            {**scope, "headers": [*scope["headers"], (PRINCIPAL_HEADER.encode(), signed.encode())]}, receive, send
        )

    async def _http(
        self, connection: HTTPConnection, principal: Principal, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request, decided for what it asks Dagster to change, passed on with its principal signed
        for its body (the GraphQL request as the gate read it)."""
        body = await whole_body(receive)
        if body is None:  # the client left before it had sent the whole request
            return
        asked = None
        try:
            if _graphql(scope):
                asked = await run_in_threadpool(self._read_and_allow, connection, principal, body)
            elif scope["method"] not in SAFE_METHODS:
                # The webserver's other routes that change something (its reports of asset events):
                # no launch, so the admins' alone.
                await run_in_threadpool(self._allow_route, connection, principal)
        except (InvalidInput, AccessDenied) as err:
            await _refusal(err)(scope, receive, send)
            return
        headers = scope["headers"]
        if asked is not None:
            body = asked.body
            headers = [(n, v) for n, v in headers if n.lower() not in REWRITTEN] + [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
            scope = {**scope, "query_string": b""}
        signed = signed_principal(principal, self.keys, method=scope["method"], body=body)
        scope = {**scope, "headers": [*headers, (PRINCIPAL_HEADER.encode(), signed.encode())]}
        if asked is not None and asked.backfills:
            send = self._recording_backfills(principal, asked, send)
        await self.app(scope, replaying(body, receive), send)

    def _read_and_allow(self, connection: HTTPConnection, principal: Principal, body: bytes) -> GraphQLRequest:
        """The GraphQL request as the webserver would read it, once what it asks Dagster to change,
        besides launches, is decided and recorded; AccessDenied for what is refused."""
        query = connection.scope.get("query_string", b"").decode("latin-1")
        asked = read(connection.headers.get("content-type", ""), body, query)
        if not asked.controls and not asked.stops:
            return asked
        policy = self.service.custody.policy
        identity, how = principal.identity(), principal.recorded()
        decisions = [
            (policy.decide(identity, Verb.CONTROL, None), {**how, **_control(field)}) for field in asked.controls
        ]
        decisions.extend(
            (self._stop(policy, identity, field), {**how, "mutation": field.name}) for field in asked.stops
        )
        enforce_all(self.service.custody.store, decisions)
        return asked

    def _allow_route(self, connection: HTTPConnection, principal: Principal) -> None:
        """Decide, for a verified admin, a request to one of the webserver's other routes that change
        something; record it either way."""
        decision = self.service.custody.policy.decide(principal.identity(), Verb.CONTROL, None)
        details = {
            **principal.recorded(),
            "path": shown(connection.url.path, 200),
            "http_method": connection.scope["method"],
        }
        enforce_all(self.service.custody.store, [(decision, details)])

    def _stop(self, policy: Policy, identity: Identity, field: Asked) -> Decision:
        """Whether `identity` may stop the runs, or stop or resume the backfill, `field` names: they
        are theirs, or they are an admin."""
        argument = STOPS[field.name]
        named = field.arguments.get(argument)
        stopped = named if isinstance(named, list) else [named]
        if argument == "backfillId":
            launcher = launcher_of(self.service.custody.store, str(named))
            whose = [launcher.user if launcher is not None else None]
        else:
            runs = self.service.runs
            whose = [runs.requested_by(str(run)) if runs is not None else None for run in stopped]
        if whose and all(user == identity.user for user in whose):
            return Decision(identity, Verb.CONTROL, None, True, f"{identity.user} controls what they launched")
        return policy.decide(identity, Verb.CONTROL, None)

    def _recording_backfills(self, principal: Principal, asked: GraphQLRequest, send: Send) -> Send:
        """`send` for the answer to backfill mutations: it holds the answer back until the backfills
        it names are recorded as `principal`'s, so that their runs are decided for them."""
        start: Message | None = None
        chunks: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            answer = b"".join(chunks)
            made = backfill_ids(answer, asked)
            await run_in_threadpool(self._launched, principal, asked, made)
            await send(start)
            await send({"type": "http.response.body", "body": answer})

        return sending

    def _launched(self, principal: Principal, asked: GraphQLRequest, made: dict[str, str]) -> None:
        """Record each backfill `asked` made as `principal`'s, under the backfill's id."""
        identity, store = principal.identity(), self.service.custody.store
        for field in asked.backfills:
            backfill = made.get(field.key)
            if backfill is None:
                continue
            what = "launched" if field.name == "launchPartitionBackfill" else "re-executed"
            reason = f"{principal.user} {what} backfill {backfill} signed in ({principal.method})"
            details = {**principal.recorded(), "backfill": backfill, "mutation": field.name}
            record(store, Decision(identity, Verb.SESSION, None, True, reason), backfill, details)

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


def _graphql(scope: Scope) -> bool:
    """Whether the request asks Dagster's GraphQL: a POST to its endpoint, under any path prefix."""
    return scope["method"] == "POST" and str(scope["path"]).rstrip("/").endswith("/graphql")


def _refusal(err: InvalidInput | AccessDenied) -> JSONResponse:
    """A GraphQL request refused at the gate, in GraphQL's words too, so that the UI shows why."""
    said = str(err).removeprefix("denied: ")
    status = 403 if isinstance(err, AccessDenied) else 400
    return JSONResponse({"detail": said, "errors": [{"message": f"Custody refused this: {said}"}]}, status_code=status)


def _control(field: Asked) -> dict[str, object]:
    """What the ledger keeps of a control: the mutation, its arguments, and the sensor or schedule it
    names, by which Custody's Dagster instance finds the decision as it makes the change."""
    named = instigator(field.name, field.arguments)
    return {"mutation": field.name, "arguments": _said(field), **({"instigator": named} if named else {})}


def _said(field: Asked) -> str:
    return ", ".join(f"{name}={field.argument(name)}" for name in sorted(field.arguments))[:400]


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
