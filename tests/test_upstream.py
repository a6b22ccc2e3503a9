"""What `custody serve --dagster-url` passes on to the webserver behind it, seen from that webserver:
here a small ASGI app on a loopback port, served by uvicorn, that answers each request with what it
received. Each request reaches it on the path the client sent, with its signed-in user signed and
none of the service's credentials; a WebSocket ends on both sides however the browser leaves."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from governance.config import Settings
from governance.service.principal import PRINCIPAL_HEADER, SIGNING_VARIABLE, VERIFY_VARIABLE, UiKeys, signed_for
from tests.conftest import DEMO_SPECS, plain_environ, without_approval
from tests.dagster_servers import Served, start_service, stop


@dataclass
class Echo:
    """The webserver's side: what reached it."""

    closes: list[int] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope, receive)
            said = {"path": scope["raw_path"].decode(), "query": scope["query_string"].decode()}
            headers = [[name.decode(), value.decode()] for name, value in scope["headers"]]
            await JSONResponse({**said, "headers": headers, "body": (await request.body()).decode()})(
                scope, receive, send
            )
        elif scope["type"] == "websocket":
            await self._echo(WebSocket(scope, receive, send))

    async def _echo(self, websocket: WebSocket) -> None:
        await websocket.accept(subprotocol=(websocket.scope.get("subprotocols") or [None])[0])
        try:
            while True:
                await websocket.send_text(await websocket.receive_text())
        except WebSocketDisconnect as gone:
            self.closes.append(gone.code)


@dataclass(frozen=True)
class Behind:
    echo: Echo
    served: Served
    keys: UiKeys


@pytest.fixture(scope="module")
def behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Behind]:
    echo = Echo()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(echo, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    home = tmp_path_factory.mktemp("upstream") / "home"
    keys = UiKeys.new()
    env = {**plain_environ(home), SIGNING_VARIABLE: keys.environ()[SIGNING_VARIABLE]}
    url = f"http://127.0.0.1:{listening.getsockname()[1]}"
    process, port = start_service(
        without_approval(Settings.under(home, specs=DEMO_SPECS)), env, args=["--dagster-url", url]
    )
    try:
        yield Behind(echo, Served(port), keys)
    finally:
        stop(process)
        server.should_exit = True
        thread.join(timeout=10)


def test_a_signed_in_request_reaches_the_webserver_with_its_user_signed_and_none_of_the_service_s_credentials(behind):
    bob = behind.served.as_user("bob")
    forged = {PRINCIPAL_HEADER: "alice", "Authorization": "Bearer not-a-token", "X-Forwarded-For": "10.0.0.9"}
    answer = bob.http.get(f"{bob.base}/server_info", headers=forged, timeout=30)
    assert answer.status_code == 200, answer.text
    received = answer.json()["headers"]
    names = [name for name, _ in received]
    assert not {"cookie", "authorization", "x-forwarded-for"} & set(names)
    [signed] = [value for name, value in received if name == PRINCIPAL_HEADER]
    found = signed_for(signed, "GET", b"", webserver_of(behind))
    assert found is not None and (found.principal.user, found.principal.channel) == ("bob", "ui")


def webserver_of(behind: Behind) -> dict[str, str]:
    """The environment of the webserver behind the service: the public key alone."""
    return {VERIFY_VARIABLE: behind.keys.environ()[VERIFY_VARIABLE]}


def raw_get(behind: Behind, target: str) -> tuple[int, dict]:
    """GET `target` exactly as written, as bob: HTTP libraries resolve dot segments first."""
    cookie = "; ".join(f"{c.name}={c.value}" for c in behind.served.as_user("bob").http.cookies)
    connection = http.client.HTTPConnection("127.0.0.1", behind.served.port, timeout=30)
    connection.putrequest("GET", target, skip_accept_encoding=True)
    connection.putheader("Cookie", cookie)
    connection.endheaders()
    answer = connection.getresponse()
    return answer.status, json.loads(answer.read())


def test_the_path_reaches_the_webserver_as_the_client_sent_it(behind):
    status, said = raw_get(behind, "/assets/%2E%2E/runs/a%20b?tab=logs")
    assert status == 200 and (said["path"], said["query"]) == ("/assets/%2E%2E/runs/a%20b", "tab=logs")


@pytest.mark.parametrize("target", ["/graphql/x/..?query=x", "/assets/./graphql", "//graphql"])
def test_a_path_the_next_hop_would_read_as_another_is_refused(behind, target):
    status, said = raw_get(behind, target)
    assert status == 400 and said == {"detail": "the path must begin with one / and hold no . or .. segment"}


def test_a_websocket_to_a_path_the_next_hop_would_read_as_another_is_refused(behind):
    bob = behind.served.as_user("bob")
    cookie = "; ".join(f"{c.name}={c.value}" for c in bob.http.cookies)
    with pytest.raises(InvalidStatus) as refused:
        connect(
            f"ws://127.0.0.1:{behind.served.port}/x/../graphql",
            additional_headers={"Cookie": cookie, "Origin": bob.base},
            open_timeout=30,
        )
    assert refused.value.response.status_code == 400


def test_a_graphql_request_reaches_the_webserver_as_the_gate_read_it_signed_for_that_body_alone(behind):
    bob = behind.served.as_user("bob")
    answer = bob.http.post(
        f"{bob.base}/graphql?query=mutation%20%7B%20stopSensor%20%7D",
        data="{ version }",
        headers={"Origin": bob.base, "Content-Type": "application/graphql"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    received = answer.json()
    assert received["body"] == '{"query": "{ version }", "variables": {}, "operationName": null}'
    assert received["query"] == ""
    headers = dict(received["headers"])
    assert headers["content-type"] == "application/json"
    signed = signed_for(headers[PRINCIPAL_HEADER], "POST", received["body"].encode(), webserver_of(behind))
    assert signed is not None and (signed.principal.user, signed.principal.channel) == ("bob", "ui")


def test_a_browser_that_drops_its_websocket_ends_the_webserver_s_side_normally(behind):
    bob = behind.served.as_user("bob")
    cookie = "; ".join(f"{c.name}={c.value}" for c in bob.http.cookies)
    before = len(behind.echo.closes)
    with connect(
        f"ws://127.0.0.1:{behind.served.port}/graphql",
        subprotocols=["graphql-ws"],
        additional_headers={"Cookie": cookie, "Origin": bob.base},
        open_timeout=30,
    ) as websocket:
        websocket.send("hello")
        assert websocket.recv(timeout=30) == "hello"
        websocket.socket.shutdown(socket.SHUT_RDWR)  # gone, with no closing frame: the service sees 1006
    deadline = time.monotonic() + 30
    while len(behind.echo.closes) == before:
        assert time.monotonic() < deadline, "the webserver's side of the WebSocket stayed open"
        time.sleep(0.1)
    assert behind.echo.closes[-1] == 1000
    assert bob.http.get(f"{bob.base}/server_info", timeout=30).status_code == 200
