"""The login in front of the Dagster UI, over HTTP as a browser or a script meets it: sessions, what
is refused without one, and what is refused with one when it comes from another site.

One `custody serve` on one home serves every test of this module; each test signs in as the users it
needs, so none depends on another's session."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from itsdangerous import URLSafeTimedSerializer
from sqlmodel import col, select
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from assets.launch import instance_for
from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import LedgerEntry, ServiceSession
from governance.config import Settings
from governance.demo import demo_password
from governance.service.gate import ENDED
from tests.conftest import plain_environ
from tests.dagster_servers import Served, SignedIn, form_token, start_service, stop
from tests.helpers import cli
from tests.test_ui import LAUNCH, launch_params

pytestmark = pytest.mark.xdist_group("login")
DELAY_SECONDS = 0.02  # the wait after failed logins starts here and doubles, capped at 64 times it
ASK_VERSION = {"query": "{ version }"}
RECHECK_SECONDS = 1  # how soon an open WebSocket's session is looked at again
WINDOW_SECONDS = 1  # how long the repeats of a kind of refused request are counted before they are recorded


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("login") / "home"


@pytest.fixture(scope="module")
def served(home: Path) -> Iterator[Served]:
    env = {
        **plain_environ(home),
        "CUSTODY_LOGIN_DELAY_SECONDS": str(DELAY_SECONDS),
        "CUSTODY_SESSION_RECHECK_SECONDS": str(RECHECK_SECONDS),
        "CUSTODY_REFUSALS_WINDOW_SECONDS": str(WINDOW_SECONDS),
    }
    server, port = start_service(Settings.under(home), env)
    yield Served(port)
    stop(server)


@pytest.fixture(scope="module")
def catalog(home: Path, served: Served) -> Catalog:
    return Catalog(make_engine(Settings.under(home).catalog_url))


def entries(catalog: Catalog, action: str, actor: str | None = None) -> list[dict]:
    with catalog.session() as session:
        query = select(LedgerEntry).where(LedgerEntry.action == action).order_by(col(LedgerEntry.seq))
        if actor is not None:
            query = query.where(LedgerEntry.actor == actor)
        found = session.exec(query).all()
    return [{"actor": e.actor, "assurance": e.assurance, **json.loads(e.details)} for e in found]


def session_cookie(user: SignedIn) -> str:
    return user.http.cookies["custody_session"]


def test_a_page_of_the_ui_without_a_session_leads_to_the_login_and_back_after_it(served, catalog):
    anonymous = SignedIn(served.port)
    page = anonymous.http.get(
        f"{anonymous.base}/assets/sales/clients?view=events", headers={"Accept": "text/html"}, allow_redirects=False
    )
    assert (page.status_code, page.headers["location"]) == (303, "/login?next=/assets/sales/clients%3Fview%3Devents")
    answer = anonymous.sign_in("carol", demo_password("carol"))
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    cookie = answer.cookies["custody_session"]
    assert "HttpOnly" in answer.headers["set-cookie"] and "SameSite=lax" in answer.headers["set-cookie"]
    assert anonymous.post("/graphql", ASK_VERSION).json()["data"]["version"]
    [signed] = entries(catalog, "authenticate", "carol")[-1:]
    assert (signed["result"], signed["assurance"], signed["channel"], signed["method"]) == (
        "allowed",
        "verified",
        "ui",
        "password",
    )
    assert cookie.split(".")[0] not in json.dumps(entries(catalog, "authenticate"))


def test_graphql_and_a_websocket_without_a_session_get_401(served, catalog, home):
    answer = SignedIn(served.port).post("/graphql", ASK_VERSION)
    assert (answer.status_code, answer.json()) == (401, {"detail": "sign in first"})
    launch = SignedIn(served.port).post(
        "/graphql", {"query": LAUNCH, "variables": {"params": launch_params(["sales", "names_and_products"])}}
    )
    assert (launch.status_code, launch.json()) == (401, {"detail": "sign in first"})
    assert instance_for(Settings.under(home)).get_runs() == []
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{served.port}/graphql", subprotocols=["graphql-ws"], open_timeout=30)
    assert refused.value.response.status_code == 401
    carol = served.as_user("carol")
    headers = {"Cookie": f"custody_session={session_cookie(carol)}"}
    with connect(
        f"ws://127.0.0.1:{served.port}/graphql", subprotocols=["graphql-ws"], additional_headers=headers
    ) as socket:
        assert socket.subprotocol == "graphql-ws"
    assert any(e["path"] == "/graphql" and e["result"] == "denied" for e in entries(catalog, "session", "anonymous"))


def test_a_request_sent_by_another_site_s_page_is_refused_with_a_session_too(served, catalog):
    carol = served.as_user("carol")
    evil = carol.post("/graphql", ASK_VERSION, headers={"Origin": "http://evil.example"})
    assert (evil.status_code, evil.json()["detail"]) == (
        403,
        "a request sent by a page of http://evil.example is refused: only this service's pages may send it",
    )
    fetched = carol.post("/graphql", ASK_VERSION, headers={"Sec-Fetch-Site": "cross-site"})
    assert fetched.status_code == 403
    headers = {"Cookie": f"custody_session={session_cookie(carol)}"}
    with pytest.raises(InvalidStatus) as refused:
        connect(
            f"ws://127.0.0.1:{served.port}/graphql",
            subprotocols=["graphql-ws"],
            additional_headers=headers,
            origin="http://evil.example",  # type: ignore[arg-type]
        )
    assert refused.value.response.status_code == 403
    same = carol.post("/graphql", ASK_VERSION, headers={"Origin": carol.base, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200
    assert any("evil.example" in e["reason"] for e in entries(catalog, "session"))


def test_a_page_of_another_site_gets_nothing_but_a_person_following_its_link_gets_the_page(served):
    carol = served.as_user("carol")
    image = carol.http.get(
        f"{carol.base}/graphql",
        params={"query": "{ version }"},
        headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
        allow_redirects=False,
    )
    assert image.status_code == 403
    link = carol.http.get(
        f"{carol.base}/assets",
        headers={"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Accept": "text/html"},
        allow_redirects=False,
    )
    assert link.status_code == 200 and "<html" in link.text.lower()
    behind_tls = carol.post(
        "/graphql", ASK_VERSION, headers={"Origin": f"https://{carol.base.removeprefix('http://')}"}
    )
    assert behind_tls.status_code == 200  # a gateway that ends TLS: the same host, another scheme


def test_no_page_of_the_service_or_of_the_ui_behind_it_may_be_shown_in_a_frame_of_another_page(served):
    anonymous, carol = SignedIn(served.port), served.as_user("carol")
    login = anonymous.http.get(f"{anonymous.base}/login")
    logout = carol.http.get(f"{carol.base}/logout")
    ui = carol.http.get(f"{carol.base}/assets", headers={"Accept": "text/html"})
    for page, policies in (
        (login, ["frame-ancestors 'none'"]),
        (logout, ["frame-ancestors 'none'"]),
        (ui, [ui.raw.headers.getlist("Content-Security-Policy")[0], "frame-ancestors 'none'"]),  # Dagster's own too
    ):
        assert (page.status_code, page.headers["X-Frame-Options"]) == (200, "DENY"), page.url
        assert page.raw.headers.getlist("Content-Security-Policy") == policies, page.url
    assert ui.raw.headers.getlist("Content-Security-Policy")[0].startswith("base-uri 'none'")


def test_the_ui_s_notebook_view_may_be_framed_by_the_ui_s_own_pages_alone(served):
    carol = served.as_user("carol")
    page = carol.http.get(f"{carol.base}/notebook", params={"path": "report.ipynb", "repoLocName": "assets"})
    assert (page.status_code, page.headers["X-Frame-Options"]) == (200, "SAMEORIGIN")
    assert page.raw.headers.getlist("Content-Security-Policy") == ["frame-ancestors 'self'"]


def test_graphql_asked_with_a_get_is_refused_since_it_would_run_a_mutation_from_a_link(served):
    carol = served.as_user("carol")
    answer = carol.http.get(f"{carol.base}/graphql", params={"query": "mutation { logTelemetry { __typename } }"})
    assert (answer.status_code, answer.json()["detail"]) == (
        405,
        "GraphQL is asked with POST: a GET with a query is refused",
    )


def test_an_open_websocket_closes_once_its_session_has_ended(served):
    carol = served.as_user("carol")
    headers = {"Cookie": f"custody_session={session_cookie(carol)}"}
    with connect(
        f"ws://127.0.0.1:{served.port}/graphql", subprotocols=["graphql-ws"], additional_headers=headers
    ) as socket:
        socket.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(socket.recv(timeout=30))["type"] == "connection_ack"
        page = carol.http.get(f"{carol.base}/logout")
        carol.http.post(f"{carol.base}/logout", data={"csrf": form_token(page.text)}, allow_redirects=False)
        time.sleep(RECHECK_SECONDS + 0.5)
        logs = 'subscription { pipelineRunLogs(runId: "no-such-run") { __typename } }'
        socket.send(json.dumps({"id": "1", "type": "start", "payload": {"query": logs}}))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                socket.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == ENDED


def test_a_login_form_not_sent_by_the_service_s_page_opens_no_session(served, catalog):
    before = len(entries(catalog, "authenticate", "carol"))
    forger = SignedIn(served.port)
    data = {"user": "carol", "password": demo_password("carol"), "csrf": "made-up"}
    answer = forger.http.post(f"{forger.base}/login", data=data, allow_redirects=False)
    assert answer.status_code == 403 and "this form has expired or was not sent by this service" in answer.text
    assert "custody_session" not in answer.cookies
    form = forger.http.get(f"{forger.base}/login")  # the service's real form, posted by another site's page
    token = form_token(form.text)
    answer = forger.http.post(
        f"{forger.base}/login",
        data={**data, "csrf": token},
        headers={"Origin": "http://evil.example"},
        allow_redirects=False,
    )
    assert answer.status_code == 403 and "custody_session" not in answer.cookies
    assert len(entries(catalog, "authenticate", "carol")) == before


def test_logout_ends_the_session_and_a_copy_of_its_cookie(served, catalog):
    carol = served.as_user("carol")
    copied = session_cookie(carol)
    page = carol.http.get(f"{carol.base}/logout")
    assert "Signed in as <b>carol</b>" in page.text
    token = form_token(page.text)
    answer = carol.http.post(f"{carol.base}/logout", data={"csrf": token}, allow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/login")
    thief = SignedIn(served.port)
    thief.http.cookies.set("custody_session", copied)
    refused = thief.post("/graphql", ASK_VERSION)
    assert (refused.status_code, refused.json()["detail"]) == (401, "this session has ended: sign in again")
    [ended] = [e for e in entries(catalog, "session.ended", "carol")][-1:]
    assert (ended["assurance"], ended["channel"], ended["method"]) == ("verified", "ui", "password")


def test_an_expired_session_is_refused(served, catalog):
    carol = served.as_user("carol")
    with catalog.session() as session:
        row = session.exec(select(ServiceSession).order_by(col(ServiceSession.issued_at).desc())).first()
        assert row is not None and row.user == "carol"
        row.expires_at = datetime.now(UTC) - timedelta(seconds=1)
        session.add(row)
    refused = carol.post("/graphql", ASK_VERSION)
    assert (refused.status_code, refused.json()["detail"]) == (401, "this session has expired: sign in again")


def test_a_cookie_signed_with_another_key_is_refused(served, catalog):
    carol = served.as_user("carol")
    with catalog.session() as session:
        [row] = session.exec(select(ServiceSession).where(col(ServiceSession.ended_at).is_(None)).limit(1)).all()
    forged = URLSafeTimedSerializer(b"another service's key, 32 bytes long", salt="custody-session").dumps(row.id)
    carol.http.cookies.set("custody_session", forged)
    refused = carol.post("/graphql", ASK_VERSION)
    assert (refused.status_code, refused.json()["detail"]) == (
        401,
        "this session is expired or was not made by this service: sign in again",
    )


def test_a_hundred_wrong_passwords_are_slowed_and_recorded_and_the_user_still_gets_in(served, catalog):
    guesser = SignedIn(served.port)
    answers = [guesser.sign_in("dave", f"guess-{n}") for n in range(100)]
    assert {a.status_code for a in answers} == {401}
    said = [a.text for a in answers]
    assert sum("dave: unknown user or wrong password" in text for text in said) >= 3
    assert any("too many failed logins in a row; try again in" in text for text in said)
    time.sleep(WINDOW_SECONDS + 1.5)  # the repeats of each kind are recorded as its window ends
    checked, delayed = entries(catalog, "authenticate", "dave"), entries(catalog, "authenticate.delayed", "dave")
    assert sum(e.get("repeats", 1) for e in checked + delayed) == 100  # each refusal counted, floods summed
    assert {e["result"] for e in checked + delayed} == {"denied"} and delayed
    assert {e["channel"] for e in checked + delayed} == {"ui"}
    time.sleep(64 * DELAY_SECONDS + 0.1)
    assert SignedIn(served.port).sign_in("dave", demo_password("dave")).status_code == 303


def test_an_ldap_injection_user_name_is_refused_as_a_name(served, catalog):
    answer = SignedIn(served.port).sign_in("*)(uid=*", "anything")
    assert answer.status_code == 401 and "invalid user name" in answer.text
    assert "custody_session" not in answer.cookies
    assert [e["result"] for e in entries(catalog, "authenticate", "'*)(uid=*'")] == ["denied"]


def test_an_oversized_body_gets_413_and_reaches_nothing(served):
    carol = served.as_user("carol")
    answer = carol.http.post(
        f"{carol.base}/graphql", data=b"x" * (5 * 1024 * 1024), headers={"Content-Type": "application/json"}
    )
    assert (answer.status_code, answer.json()) == (
        413,
        {"detail": "the request's body is larger than the 4 MiB a request may send"},
    )


def test_after_the_login_it_goes_only_to_a_page_of_the_service(served):
    for elsewhere in ("//evil.example/x", "https://evil.example", "/\\evil.example"):
        user = SignedIn(served.port)
        form = user.http.get(f"{user.base}/login", params={"next": elsewhere})
        token = form_token(form.text)
        answer = user.http.post(
            f"{user.base}/login",
            data={"user": "carol", "password": demo_password("carol"), "csrf": token, "next": elsewhere},
            allow_redirects=False,
        )
        assert (answer.status_code, answer.headers["location"]) == (303, "/")


def test_serve_answers_the_api_alone_in_several_workers_and_only_with_a_key_they_share(cli_env, capsys, monkeypatch):
    monkeypatch.delenv("CUSTODY_SESSION_SECRET", raising=False)
    assert cli(capsys, "serve", "--no-ui", "--workers", "2")[::2] == (
        1,
        (
            "error: --workers 2 needs CUSTODY_SESSION_SECRET: without a key they share, a token one process "
            "issued would be refused by the others\n"
        ),
    )
    monkeypatch.setenv("CUSTODY_SESSION_SECRET", "x" * 32)
    assert cli(capsys, "serve", "--workers", "2")[::2] == (
        1,
        (
            "error: --workers 2 answers the API in several processes, and the UI is served by one: give --no-ui "
            "too, or serve the UI with --workers 1\n"
        ),
    )


def test_serve_refuses_a_short_session_secret_and_a_lifetime_that_is_not_seconds(cli_env, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_SESSION_SECRET", "too-short")
    code, _, err = cli(capsys, "serve", "--no-ui")
    assert (code, err.strip()) == (
        1,
        (
            "error: CUSTODY_SESSION_SECRET is shorter than 32 characters: make one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        ),
    )
    monkeypatch.setenv("CUSTODY_SESSION_SECRET", "x" * 32)
    monkeypatch.setenv("CUSTODY_SESSION_SECONDS", "8h")
    code, _, err = cli(capsys, "serve", "--no-ui")
    assert (code, err.strip()) == (
        1,
        "error: CUSTODY_SESSION_SECONDS='8h': give a whole number of seconds, such as 28800",
    )


def test_serve_refuses_a_number_of_threads_that_is_not_a_whole_number(cli_env, capsys, monkeypatch):
    monkeypatch.setenv("CUSTODY_SERVICE_THREADS", "many")
    code, _, err = cli(capsys, "serve", "--no-ui")
    assert code == 1 and "CUSTODY_SERVICE_THREADS" in err and "many" in err
