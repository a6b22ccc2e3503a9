"""OAuth 2.0's token endpoint (RFC 6749, the client credentials grant): a service account's client
renews its short-lived token by itself, so that a pipeline outliving a token keeps reporting.
OpenLineage's own `oauth2` token provider posts the events; bad token requests get RFC 6749's
errors, and each sign-in, allowed or refused, is recorded.

One `custody serve` on a demo home whose tokens last two seconds serves every test."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import requests
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import Job, Run, RunEvent, RunState
from openlineage.client.transport.http import HttpConfig, HttpTransport, OAuth2ClientCredentialsTokenProvider
from sqlmodel import select

from governance.catalog import Catalog
from governance.catalog.engine import make_engine
from governance.catalog.models import ForeignEvent
from governance.config import Settings
from tests.conftest import plain_environ
from tests.dagster_servers import start_service, stop
from tests.helpers import last_seq, recorded

pytestmark = pytest.mark.xdist_group("oauth")
LIFETIME = 2
BOT = ("lineage-bot", "lineage-bot-demo")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, Catalog]]:
    home = tmp_path_factory.mktemp("oauth") / "home"
    settings = Settings.under(home)
    server, port = start_service(settings, {**plain_environ(home), "CUSTODY_TOKEN_SECONDS": str(LIFETIME)}, ui=False)
    engine = make_engine(settings.catalog_url)
    try:
        yield f"http://127.0.0.1:{port}", Catalog(engine)
    finally:
        stop(server)
        engine.dispose()


def ask(url: str, form: dict[str, str] | str, headers: dict[str, str] | None = None) -> requests.Response:
    return requests.post(f"{url}/api/v1/oauth/tokens", data=form, headers=headers or {}, timeout=30)


def basic(client: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode()}


def lineage_client(url: str, refresh_buffer: int) -> OpenLineageClient:
    """openlineage-python's HTTP transport, renewing its token by the client credentials grant."""
    provider = OAuth2ClientCredentialsTokenProvider(
        {
            "clientId": BOT[0],
            "clientSecret": BOT[1],
            "tokenEndpoint": f"{url}/api/v1/oauth/tokens",
            "tokenRefreshBuffer": refresh_buffer,
        }
    )
    config = HttpConfig(url=url, endpoint="api/v1/lineage", auth=provider)
    return OpenLineageClient(transport=HttpTransport(config))


def start_event(run_id: str) -> RunEvent:
    return RunEvent(
        eventType=RunState.START,
        eventTime=datetime.now(UTC).isoformat(),
        run=Run(runId=run_id),
        job=Job(namespace="airflow://scheduler.example", name="reports.long"),
        producer="https://github.com/apache/airflow/tree/providers-openlineage/2.6.0",
    )


def kept(catalog: Catalog, run_id: str) -> int:
    with catalog.session() as session:
        return len(session.exec(select(ForeignEvent).where(ForeignEvent.run_id == run_id)).all())


def test_a_client_gets_a_short_lived_token_by_its_credentials_in_basic(served):
    url, _ = served
    answer = ask(url, {"grant_type": "client_credentials"}, basic(*BOT))

    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    token = answer.json()
    assert (token["token_type"], token["expires_in"]) == ("Bearer", LIFETIME)
    me = requests.get(f"{url}/api/v1/whoami", headers={"Authorization": f"Bearer {token['access_token']}"}, timeout=30)
    assert me.json()["user"] == "lineage-bot"


def test_a_client_may_give_its_credentials_in_the_form(served):
    url, _ = served
    form = {"grant_type": "client_credentials", "client_id": BOT[0], "client_secret": BOT[1], "scope": "lineage"}

    assert ask(url, form).status_code == 200


def test_a_pipeline_outliving_its_tokens_keeps_reporting_through_openlineage_s_oauth2_provider(served):
    url, catalog = served
    client = lineage_client(url, refresh_buffer=1)
    runs = [str(uuid.uuid4()) for _ in range(3)]
    for run_id in runs:
        client.emit(start_event(run_id))
        time.sleep(LIFETIME + 0.5)  # the token it used has expired by the next event

    assert [kept(catalog, run_id) for run_id in runs] == [1, 1, 1]


def test_a_wrong_secret_is_refused_as_the_rfc_says_and_recorded(served):
    url, catalog = served
    since = last_seq(catalog)

    answer = ask(url, {"grant_type": "client_credentials"}, basic("lineage-bot", "guess"))

    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == 'Basic realm="custody"'
    assert answer.json()["error"] == "invalid_client"
    assert "guess" not in answer.text
    deadline = time.monotonic() + 30
    while not (refused := _sign_ins(catalog, since, "lineage-bot")):
        assert time.monotonic() < deadline, "the refused sign-in was not recorded"
        time.sleep(0.2)
    assert refused[0]["result"] == "denied" and refused[0]["via"] == "oauth2 client credentials"


@pytest.mark.parametrize(
    ("form", "headers", "error"),
    [
        ({"grant_type": "password", "username": "bob", "password": "x"}, basic(*BOT), "unsupported_grant_type"),
        ({}, basic(*BOT), "invalid_request"),
        ("grant_type=client_credentials&grant_type=client_credentials", None, "invalid_request"),
        (
            {"grant_type": "client_credentials", "client_id": BOT[0], "client_secret": BOT[1]},
            basic(*BOT),
            "invalid_request",
        ),
        ({"grant_type": "client_credentials"}, None, "invalid_client"),
        ({"grant_type": "client_credentials"}, {"Authorization": "Basic !!!"}, "invalid_client"),
        ({"grant_type": "client_credentials"}, {"Authorization": "Bearer x"}, "invalid_client"),
    ],
)
def test_a_token_request_that_is_not_one_gets_the_rfc_s_error(served, form, headers, error):
    url, _ = served
    sent = dict(headers or {})
    if isinstance(form, str):
        sent["Content-Type"] = "application/x-www-form-urlencoded"

    answer = ask(url, form, sent)

    assert answer.status_code in (400, 401)
    assert answer.json()["error"] == error, answer.text


def test_a_token_request_in_json_is_refused(served):
    url, _ = served
    answer = requests.post(
        f"{url}/api/v1/oauth/tokens",
        json={"grant_type": "client_credentials", "client_id": BOT[0], "client_secret": BOT[1]},
        timeout=30,
    )

    assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")


def _sign_ins(catalog: Catalog, since: int, user: str) -> list[dict]:
    return [entry["details"] for entry in recorded(catalog, actor=user, from_seq=since + 1)]
