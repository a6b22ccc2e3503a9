"""What Custody relies on from Dagster's internals to serve its UI behind the login (assets/ui.py) and
to know who launched a run (assets/coordinator.py): checked here, so that a Dagster upgrade that
changes them fails these tests rather than the login."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from sqlmodel import select
from starlette.requests import Request
from starlette.testclient import TestClient

from assets.coordinator import launched_by, refuse_unsigned
from assets.dagster_internals import (
    PARENT_RUN_ID_TAG,
    WorkspaceFileTarget,
    WorkspaceProcessContext,
    create_app_from_workspace_process_context,
)
from assets.factory import BACKFILL_TAG, LAUNCH_TAG, REQUESTED_BY_TAG, backfill_launch, requester
from assets.launch import instance_for
from assets.ui import SignedInWorkspace, dagster_ui
from governance.catalog.models import LedgerEntry
from governance.errors import NotSignedIn
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


def request(*headers: tuple[bytes, bytes]) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/graphql", "headers": list(headers)})


def test_a_run_is_launched_by_the_signed_principal_of_the_request_that_submits_it_or_by_the_daemon(cli_env):
    instance = instance_for(cli_env)
    bob = Principal("bob", "password", "session-id")
    with WorkspaceProcessContext(instance, None) as process:

        def submitted(source: Request | None) -> dg.SubmitRunContext:
            return dg.SubmitRunContext(dg.DagsterRun(job_name="any"), process.create_request_context(source=source))

        signed = submitted(request((PRINCIPAL_HEADER.encode(), signed_principal(bob).encode())))
        assert launched_by(signed) == bob
        # A request without a Host header is a request all the same: never taken for the daemon.
        unsigned = launched_by(submitted(request((PRINCIPAL_HEADER.encode(), b"bob"))))
        assert isinstance(unsigned, NotSignedIn)
        assert launched_by(submitted(None)) is None


def test_a_run_launched_unsigned_is_refused_and_recorded_as_anonymous_with_the_name_it_claimed(catalog):
    run = dg.DagsterRun(job_name="any", tags={REQUESTED_BY_TAG: "alice"})
    refusal = NotSignedIn("sign in")
    with pytest.raises(NotSignedIn):
        refuse_unsigned(catalog, run, refusal)
    with catalog.session() as session:
        [entry] = session.exec(select(LedgerEntry).where(LedgerEntry.action == "session")).all()
    assert (entry.actor, json.loads(entry.details)["claimed"]) == ("anonymous", "alice")


def test_a_re_execution_names_its_parent_in_the_tag_the_coordinator_reads():
    assert PARENT_RUN_ID_TAG == "dagster/parent_run_id"


def test_only_a_principal_this_process_signed_is_trusted():
    principal = Principal("bob", "password", "session-id")
    assert principal_from(signed_principal(principal)) == principal
    alice = signed_principal(Principal("alice", "password", "session-id"))
    forged = f"{signed_principal(principal).split('.')[0]}.{alice.split('.')[1]}"  # bob's payload, alice's mac
    for header in (None, "", "bob", forged, signed_principal(principal) + "0"):
        assert principal_from(header) is None


def test_a_backfill_launched_by_a_signed_in_request_names_its_launcher_and_the_entry_that_proves_it(cli_env):
    instance = instance_for(cli_env)
    bob = signed_principal(Principal("bob", "password", "session-id"))
    with SignedInWorkspace(instance, None) as process:
        tags = process.create_request_context(request((PRINCIPAL_HEADER.encode(), bob.encode()))).get_viewer_tags()
        unsigned = process.create_request_context(request()).get_viewer_tags()
    assert tags[REQUESTED_BY_TAG] == "bob" and tags[LAUNCH_TAG]
    assert unsigned == {REQUESTED_BY_TAG: "", LAUNCH_TAG: ""}
    custody = instance.run_coordinator.custody
    [entry] = entries_of(custody.catalog, "session")
    assert (entry.actor, entry.assurance, entry.run_id) == ("bob", "verified", tags[LAUNCH_TAG])
    assert json.loads(entry.details)["channel"] == "ui"


def test_a_backfill_s_run_is_for_the_launcher_its_launch_entry_names_and_no_one_else(cli_env):
    instance = instance_for(cli_env)
    with SignedInWorkspace(instance, None) as process:
        signed = request((PRINCIPAL_HEADER.encode(), signed_principal(Principal("bob", "password", "s")).encode()))
        launched = process.create_request_context(signed).get_viewer_tags()
    custody = instance.run_coordinator.custody
    policy = custody.policy()

    def identity(launch: str | None, **tags: str):
        tags = {BACKFILL_TAG: "bf1", **tags}
        return requester(custody.catalog, custody.lake, policy, "run-1", tags, None, launch)

    found = identity(launched[LAUNCH_TAG], **launched)
    assert (found.user, found.assurance, found.method, found.channel) == ("bob", "verified", "password", "ui")
    assert identity(launched[LAUNCH_TAG], **{**launched, REQUESTED_BY_TAG: "alice"}).assurance == "asserted"
    assert identity("another-launch", **launched).assurance == "asserted"
    assert identity(None, **{REQUESTED_BY_TAG: "", LAUNCH_TAG: ""}).assurance == "none"
    # A run naming a backfill the instance does not hold comes from no launch, whatever its tags say.
    assert backfill_launch(instance, {BACKFILL_TAG: "bf1", **launched}) is None


BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


def test_a_launch_id_copied_onto_a_later_backfill_comes_from_no_launch(cli_env):
    """A webserver served without Custody's request context (`dg dev`) keeps the tags typed for a
    backfill: one may copy the launch id another's backfill runs carry."""
    instance = instance_for(cli_env)
    with SignedInWorkspace(instance, None) as process:
        signed = request((PRINCIPAL_HEADER.encode(), signed_principal(Principal("bob", "password", "s")).encode()))
        launched = process.create_request_context(signed).get_viewer_tags()
    target = WorkspaceFileTarget(paths=[str(ROOT / "workspace.yaml")])
    with (
        WorkspaceProcessContext(instance, target) as stock,
        TestClient(create_app_from_workspace_process_context(stock)) as client,
    ):

        def backfill() -> str:
            params = {
                "assetSelection": [{"path": ["sales", "names_and_products"]}],
                "allPartitions": True,
                "tags": [{"key": key, "value": value} for key, value in launched.items()],
            }
            answer = client.post("/graphql", json={"query": BACKFILL, "variables": {"params": params}}).json()
            made = answer["data"]["launchPartitionBackfill"]
            assert made["__typename"] == "LaunchBackfillSuccess", made
            return made["backfillId"]

        first, copied = backfill(), backfill()
    assert backfill_launch(instance, {BACKFILL_TAG: first, **launched}) == launched[LAUNCH_TAG]
    assert backfill_launch(instance, {BACKFILL_TAG: copied, **launched}) is None


def entries_of(catalog, action: str) -> list[LedgerEntry]:
    with catalog.session() as session:
        return list(session.exec(select(LedgerEntry).where(LedgerEntry.action == action)))
