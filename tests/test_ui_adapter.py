"""What Custody relies on from Dagster's internals to serve its UI behind the login (assets/ui.py) and
to know who launched a run (assets/launchers.py): checked here, so that a Dagster upgrade that
changes them fails these tests rather than the login."""

from __future__ import annotations

import asyncio
import json

import dagster as dg
import pytest
from sqlmodel import select
from starlette.requests import Request
from starlette.testclient import TestClient

from assets import launchers
from assets.dagster_internals import WorkspaceProcessContext
from assets.factory import REQUESTED_BY_TAG
from assets.launch import instance_for
from assets.launchers import SignedLaunch, launched_by, refuse_unsigned
from assets.tags import (
    BACKFILL_ID_TAG,
    PARENT_RUN_ID_TAG,
    SCHEDULE_NAME_TAG,
    SCHEDULED_EXECUTION_TIME_TAG,
    SENSOR_NAME_TAG,
    TICK_ID_TAG,
)
from assets.ui import dagster_ui
from governance.catalog.models import LedgerEntry
from governance.errors import NotSignedIn
from governance.service.principal import PRINCIPAL_HEADER, signed_principal
from governance.service.sessions import Principal
from tests.conftest import ROOT

ASSETS = "{ assetNodes { assetKey { path } } }"


def test_the_ui_is_an_asgi_app_serving_the_workspace_s_assets_over_graphql(cli_env):
    with dagster_ui(cli_env, ROOT / "workspace.yaml") as app, TestClient(app) as client:
        answer = client.post("/graphql", json={"query": ASSETS})
        assert answer.status_code == 200
        keys = {"/".join(node["assetKey"]["path"]) for node in answer.json()["data"]["assetNodes"]}
        assert "sales/products" in keys
        assert client.get("/server_info").json()["dagster_webserver_version"]


def request(
    body: bytes,
    *headers: tuple[bytes, bytes],
    method: str = "POST",
    query: bytes = b"",
    content_type: bytes = b"application/json",
) -> Request:
    """A request as Dagster's GraphQL endpoint hands it to the context: its body read."""
    scope = {
        "type": "http",
        "method": method,
        "path": "/graphql",
        "query_string": query,
        "headers": [(b"content-type", content_type), *headers],
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    made = Request(scope, receive)
    asyncio.run(made.body())
    return made


def test_a_run_is_launched_by_the_request_whose_header_was_signed_for_it_or_by_the_daemon(cli_env):
    instance = instance_for(cli_env)
    bob = Principal("bob", "password", "session-key")
    body = b'{"query": "mutation { launchRun }"}'
    with WorkspaceProcessContext(instance, None) as process:

        def submitted(source: Request | None) -> dg.SubmitRunContext:
            return dg.SubmitRunContext(dg.DagsterRun(job_name="any"), process.create_request_context(source=source))

        header = signed_principal(bob, method="POST", body=body).encode()
        launched = launched_by(submitted(request(body, (PRINCIPAL_HEADER.encode(), header))))
        assert isinstance(launched, SignedLaunch) and launched.principal == bob
        # The same header on a request with another body is no one's: it was signed for the first.
        other = launched_by(submitted(request(body + b" ", (PRINCIPAL_HEADER.encode(), header))))
        assert isinstance(other, NotSignedIn)
        # A request without a Host header is a request all the same: never taken for the daemon.
        unsigned = launched_by(submitted(request(body, (PRINCIPAL_HEADER.encode(), b"bob"))))
        assert isinstance(unsigned, NotSignedIn)
        assert launched_by(submitted(None)) is None
        # Dagster takes a query from the URL too (from a GET, or a POST of another type): such a
        # request is not how the gate passes one on, and launches nothing, whatever header it bears.
        for other in (
            {"method": "GET"},
            {"query": b"query=mutation%20%7B%20launchRun%20%7D"},
            {"content_type": b"text/plain"},
        ):
            assert isinstance(
                launched_by(submitted(request(body, (PRINCIPAL_HEADER.encode(), header), **other))), NotSignedIn
            )


def test_dagster_s_graphql_endpoint_hands_the_context_the_request_whose_body_it_read(cli_env, monkeypatch):
    sources = []
    made = WorkspaceProcessContext.create_request_context

    def keeping(self, source=None):
        sources.append(source)
        return made(self, source)

    monkeypatch.setattr(WorkspaceProcessContext, "create_request_context", keeping)
    body = json.dumps({"query": ASSETS}).encode()
    with dagster_ui(cli_env, ROOT / "workspace.yaml") as app, TestClient(app) as client:
        answer = client.post("/graphql", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 200
    asked = [source for source in sources if isinstance(source, Request)]
    assert asked and asked[-1].method == "POST" and launchers._body(asked[-1]) == body


def test_a_run_launched_unsigned_is_refused_and_recorded_as_anonymous_with_the_name_it_claimed(catalog):
    run = dg.DagsterRun(job_name="any", tags={REQUESTED_BY_TAG: "alice"})
    refusal = NotSignedIn("sign in")
    with pytest.raises(NotSignedIn):
        refuse_unsigned(catalog, run, refusal)
    with catalog.session() as session:
        [entry] = session.exec(select(LedgerEntry).where(LedgerEntry.action == "session")).all()
    assert (entry.actor, json.loads(entry.details)["claimed"]) == ("anonymous", "alice")


def test_the_tags_the_coordinator_reads_are_dagster_s():
    assert PARENT_RUN_ID_TAG == "dagster/parent_run_id"
    assert BACKFILL_ID_TAG == "dagster/backfill"
    assert (SCHEDULE_NAME_TAG, SENSOR_NAME_TAG, TICK_ID_TAG) == (
        "dagster/schedule_name",
        "dagster/sensor_name",
        "dagster/tick",
    )
    assert SCHEDULED_EXECUTION_TIME_TAG == ".dagster/scheduled_execution_time"
