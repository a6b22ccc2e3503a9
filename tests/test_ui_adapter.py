"""What Custody relies on from Dagster's internals to serve its UI behind the login (assets/ui.py) and
to know who launched a run (assets/coordinator.py): checked here, so that a Dagster upgrade that
changes them fails these tests rather than the login."""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.tags import PARENT_RUN_ID_TAG
from dagster._core.workspace.context import WorkspaceProcessContext
from starlette.requests import Request
from starlette.testclient import TestClient

from assets.launch import instance_for
from assets.ui import dagster_ui
from governance.service.principal import PRINCIPAL_HEADER, principal_from, signed_principal
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


def test_a_submitted_run_s_context_reads_the_headers_of_the_request_that_launched_it(cli_env):
    instance = instance_for(cli_env)
    request = Request(
        {"type": "http", "method": "POST", "path": "/graphql", "headers": [(b"x-custody-principal", b"signed")]}
    )
    with WorkspaceProcessContext(instance, None) as process:
        launched = dg.SubmitRunContext(dg.DagsterRun(job_name="any"), process.create_request_context(source=request))
        assert launched.get_request_header(PRINCIPAL_HEADER) == "signed"
        queued = dg.SubmitRunContext(dg.DagsterRun(job_name="any"), process.create_request_context())
        assert queued.get_request_header("host") is None  # the daemon's submissions answer no request


def test_a_re_execution_names_its_parent_in_the_tag_the_coordinator_reads():
    assert PARENT_RUN_ID_TAG == "dagster/parent_run_id"


def test_only_a_principal_this_process_signed_is_trusted():
    principal = Principal("bob", "password", "session-id")
    assert principal_from(signed_principal(principal)) == principal
    alice = signed_principal(Principal("alice", "password", "session-id"))
    forged = f"{signed_principal(principal).split('.')[0]}.{alice.split('.')[1]}"  # bob's payload, alice's mac
    for header in (None, "", "bob", forged, signed_principal(principal) + "0"):
        assert principal_from(header) is None
