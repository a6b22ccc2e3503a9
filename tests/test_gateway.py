"""Single sign-on: Apache httpd with mod_authnz_ldap, configured as deploy/httpd/custody-ldap.conf says,
authenticates people against the tests' slapd and names them to `custody serve`, which trusts that
header from httpd alone. One slapd, one service and one httpd serve every test of this module."""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from sqlmodel import col, select
from websockets.sync.client import connect

from assets.launch import instance_for
from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import LedgerEntry
from governance.config import Settings
from tests.conftest import plain_environ
from tests.dagster_servers import start_service, stop
from tests.helpers import cli
from tests.httpd_server import httpd_gateway
from tests.ldap_server import LdapServer, environment, password_of, populated_slapd
from tests.test_ui import LAUNCH, launch_params

pytestmark = pytest.mark.xdist_group("gateway")
SECRET = secrets.token_urlsafe(32)
MATERIALIZE = {"params": launch_params(["sales", "names_and_products"])}


@pytest.fixture(scope="module")
def ldap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LdapServer]:
    with populated_slapd(tmp_path_factory.mktemp("slapd"), secrets.token_urlsafe(16)) as server:
        yield server


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway") / "home"


@pytest.fixture(scope="module")
def service(home: Path, ldap: LdapServer) -> Iterator[int]:
    env = {
        **plain_environ(home),
        **environment(ldap),
        "CUSTODY_GATEWAY_USER_HEADER": "X-Remote-User",
        "CUSTODY_GATEWAY_SECRET": SECRET,
        "CUSTODY_GATEWAY_PEERS": "127.0.0.1",
    }
    server, port = start_service(Settings.under(home), env)
    yield port
    stop(server)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, service: int, ldap: LdapServer) -> Iterator[str]:
    with httpd_gateway(tmp_path_factory.mktemp("httpd"), service, ldap, SECRET) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def catalog(home: Path, service: int) -> Catalog:
    return Catalog(make_engine(Settings.under(home).catalog_url))


def sent_as_given(port: int, method: str, path: str, headers: list[tuple[str, str]]) -> tuple[int, dict]:
    """The service's answer to a request with `headers` as they are listed, a name as often as it comes
    (an HTTP library keeps one value a name), and a JSON body for a POST; its status and JSON."""
    body = b"{}" if method == "POST" else None
    sent = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))] if body else []
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.putrequest(method, path)
        for name, value in [*headers, *sent]:
            connection.putheader(name, value)
        connection.endheaders(body)
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def launch(url: str, user: str, password: str, headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(
        f"{url}/graphql",
        json={"query": LAUNCH, "variables": MATERIALIZE},
        auth=(user, password),
        headers=headers,
        timeout=120,
    )


def session_entries(catalog: Catalog, actor: str) -> list[dict]:
    with catalog.session() as session:
        found = session.exec(
            select(LedgerEntry)
            .where(LedgerEntry.action == "session", LedgerEntry.actor == actor)
            .order_by(col(LedgerEntry.seq))
        ).all()
    return [{"assurance": e.assurance, "run_id": e.run_id, **json.loads(e.details)} for e in found]


def test_a_user_httpd_authenticated_against_ldap_launches_a_run_for_themselves_verified(gateway, catalog, home):
    answer = launch(gateway, "bob", password_of("bob"))
    assert answer.status_code == 200, answer.text
    launched = answer.json()["data"]["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run = instance_for(Settings.under(home)).get_run_by_id(launched["run"]["runId"])
    assert run is not None and run.tags["custody/requested_by"] == "bob"
    [entry] = [e for e in session_entries(catalog, "bob") if e["run_id"] == run.run_id]
    assert (entry["assurance"], entry["result"], entry["method"], entry["channel"]) == (
        "verified",
        "allowed",
        "gateway",
        "ui",
    )


def test_a_name_the_client_puts_in_the_gateway_s_header_is_replaced_by_the_one_httpd_authenticated(gateway):
    answer = launch(gateway, "eve", password_of("eve"), headers={"X-Remote-User": "bob"})
    assert answer.json()["data"]["launchRun"] == {
        "__typename": "PythonError",
        "message": (
            "Custody refused this run: eve may not materialize sales/names_and_products: "
            "it needs producer (sales-producers) or owner (sales-owners)"
        ),
    }


def test_httpd_refuses_a_wrong_password_and_an_ldap_injection_name(gateway):
    for user, password in (("bob", "not-his"), ("*)(uid=*", "anything"), ("*", password_of("bob"))):
        assert launch(gateway, user, password).status_code == 401


def test_the_gateway_s_header_from_anywhere_but_httpd_is_refused_and_recorded(service, catalog):
    direct = f"http://127.0.0.1:{service}/graphql"
    for headers in (
        {"X-Remote-User": "alice"},
        {"X-Remote-User": "alice", "X-Custody-Gateway-Secret": "guessed", "X-Forwarded-For": "10.9.9.9"},
    ):
        answer = requests.post(direct, json={"query": "{ version }"}, headers=headers, timeout=30)
        assert (answer.status_code, answer.json()["detail"]) == (
            403,
            "a x-remote-user header without the gateway's secret is refused",
        )
    [refused] = [e for e in session_entries(catalog, "anonymous") if "gateway's secret" in e["reason"]]
    assert (refused["result"], refused["channel"], refused["peer"]) == ("denied", "ui", "127.0.0.1")


def test_a_request_carrying_the_gateway_s_user_or_secret_header_twice_is_refused_and_recorded(service, catalog):
    secret = ("X-Custody-Gateway-Secret", SECRET)
    for headers, repeated in (
        ([("X-Remote-User", "carol"), ("X-Remote-User", "alice"), secret], "x-remote-user"),
        ([("X-Remote-User", "carol"), secret, ("X-Custody-Gateway-Secret", "guessed")], "x-custody-gateway-secret"),
        ([("X-Remote-User", "carol"), secret, secret], "x-custody-gateway-secret"),
    ):
        said = {"detail": f"a request carrying the {repeated} header more than once is refused"}
        assert sent_as_given(service, "GET", "/api/v1/whoami", headers) == (403, said)
        assert sent_as_given(service, "POST", "/graphql", headers) == (403, said)
    refused = [e for e in session_entries(catalog, "anonymous") if "more than once" in e["reason"]]
    firsts = [e for e in refused if "repeats" not in e]  # each kind's first; its repeats are counted
    assert [e["reason"] for e in firsts] == [
        "a request carrying the x-remote-user header more than once is refused",
        "a request carrying the x-custody-gateway-secret header more than once is refused",
    ]
    first = firsts[0]
    assert (first["result"], first["channel"], first["peer"], first["path"], first["claimed"]) == (
        "denied",
        "api",
        "127.0.0.1",
        "/api/v1/whoami",
        "carol",
    )


def test_a_body_sent_to_the_api_through_httpd_is_taken_as_json_alone(gateway):
    carol = ("carol", password_of("carol"))
    for path in ("/api/v1/lineage", "/api/v1/purge", "/api/v1/settings/auditor_group"):
        method = "PUT" if "settings" in path else "POST"
        for content_type, said in (
            ("text/plain", "Content-Type 'text/plain' is refused: the API takes JSON, sent as application/json"),
            (None, "a body of no Content-Type is refused: the API takes JSON, sent as application/json"),
        ):
            typed = {"Content-Type": content_type} if content_type else {}
            answer = requests.request(method, f"{gateway}{path}", data=b"{}", auth=carol, headers=typed, timeout=60)
            assert (answer.status_code, answer.json()) == (415, {"detail": said}), (path, content_type)
    as_json = requests.post(f"{gateway}/api/v1/lineage", json=[], auth=carol, timeout=60)
    assert (as_json.status_code, as_json.json()["detail"]) == (
        403,
        "carol may not report lineage: it needs the lineage group (lineage-reporters)",
    )


def test_the_api_takes_the_gateway_s_user_for_a_token_but_has_none_of_its_to_end(service):
    api = f"http://127.0.0.1:{service}/api/v1"
    vouched = {"X-Remote-User": "carol", "X-Custody-Gateway-Secret": SECRET}
    assert requests.get(f"{api}/whoami", headers=vouched, timeout=30).json() == {"user": "carol", "method": "gateway"}
    answer = requests.delete(f"{api}/tokens/current", headers=vouched, timeout=30)
    assert answer.status_code == 400 and "carries no token" in answer.json()["detail"]


def test_the_ui_s_websocket_passes_httpd_for_a_user_it_authenticated(gateway):
    credentials = requests.auth._basic_auth_str("carol", password_of("carol"))
    with connect(
        f"{gateway.replace('http', 'ws')}/graphql",
        subprotocols=["graphql-ws"],
        additional_headers={"Authorization": credentials},
        open_timeout=30,
    ) as socket:
        assert socket.subprotocol == "graphql-ws"


def test_a_gateway_trusted_by_its_address_alone_serves_after_one_line_of_warning(tmp_path):
    trusted_by_address = {"CUSTODY_GATEWAY_USER_HEADER": "X-Remote-User", "CUSTODY_GATEWAY_PEERS": "127.0.0.1"}
    said: list[str] = []
    home = tmp_path / "home"
    server, port = start_service(
        Settings.under(home), {**plain_environ(home), **trusted_by_address}, ui=False, said=said
    )
    try:
        answer = requests.get(f"http://127.0.0.1:{port}/api/v1/whoami", headers={"X-Remote-User": "carol"}, timeout=30)
    finally:
        stop(server)
    assert said == [
        (
            "warning: the gateway is trusted by its address alone (CUSTODY_GATEWAY_PEERS): any process that can "
            "connect from 127.0.0.1/32 can name any user in x-remote-user; set CUSTODY_GATEWAY_SECRET too, which "
            "the gateway adds to each request\n"
        )
    ]
    assert answer.json() == {"user": "carol", "method": "gateway"}


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        (
            {"CUSTODY_GATEWAY_USER_HEADER": "X-Remote-User"},
            (
                "error: CUSTODY_GATEWAY_USER_HEADER is set, but neither CUSTODY_GATEWAY_SECRET nor "
                "CUSTODY_GATEWAY_PEERS: a header trusted from anyone is a name anyone types; set the gateway's "
                "secret, its addresses, or both"
            ),
        ),
        (
            {"CUSTODY_GATEWAY_USER_HEADER": "X-Remote-User", "CUSTODY_GATEWAY_PEERS": "10.0.0.5,the-proxy"},
            "error: CUSTODY_GATEWAY_PEERS: 'the-proxy' is not an address or network (such as 10.0.0.5 or 10.0.0.0/24)",
        ),
        (
            {"CUSTODY_GATEWAY_USER_HEADER": "X-Remote-User", "CUSTODY_GATEWAY_SECRET": "short"},
            "error: CUSTODY_GATEWAY_SECRET is shorter than 32 characters",
        ),
    ],
)
def test_serve_refuses_a_gateway_header_it_could_not_tell_from_a_typed_name(
    cli_env, capsys, monkeypatch, variables, said
):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    code, _, err = cli(capsys, "serve", "--no-ui")
    assert (code, err.strip()) == (1, said)
