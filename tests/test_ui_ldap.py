"""The Dagster UI behind the login on an LDAP directory: a run is for whoever launches, re-executes or
stops it, signed in with a password the directory checked by a bind, and each of them is decided
for that user by the directory's groups. The service runs without Dagster's daemon: what it launches
stays queued, decided at submission."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import select

from assets.launch import instance_for
from governance.catalog import Catalog
from governance.catalog.models import LedgerEntry
from governance.config import Settings
from governance.demo import drop_demo_batches
from governance.zones import Lake
from tests.conftest import plain_environ, quick_spark_environ, without_approval
from tests.dagster_servers import Served, SignedIn, start_service, stop
from tests.ldap_server import environment, password_of, populated_slapd
from tests.test_ui import REEXECUTE, launch_answer

TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename } }"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Settings]]:
    home = tmp_path_factory.mktemp("ui-ldap") / "home"
    settings = without_approval(Settings.under(home, specs=Path("assets/specs").resolve()))
    with populated_slapd(tmp_path_factory.mktemp("slapd"), "Bind-5ecret") as ldap:
        env = {**plain_environ(home), **quick_spark_environ(), **environment(ldap)}
        server, port = start_service(settings, env)
        try:
            yield Served(port), settings
        finally:
            stop(server)


def as_user(served: Served, user: str) -> SignedIn:
    return SignedIn(served.port, user, password_of(user))


def test_a_run_is_re_executed_and_stopped_for_whoever_signs_in_to_do_it_as_ldap_says(served):
    ui, settings = served
    batch = drop_demo_batches(Lake(settings.lake)).products_batch
    config = {"ops": {"sales__products": {"config": {"batch": batch}}}}
    launched = launch_answer(as_user(ui, "bob"), ["sales", "products"], config)
    assert launched["__typename"] == "LaunchRunSuccess", launched
    parent = launched["run"]["runId"]
    # A queued run is stopped by whoever it is for, not by another user.
    refused = as_user(ui, "eve").post("/graphql", {"query": TERMINATE, "variables": {"id": parent}})
    assert refused.status_code == 403 and "eve may not change what Dagster runs or keeps" in refused.text
    assert as_user(ui, "bob").graphql(TERMINATE, {"id": parent})["terminateRun"]["__typename"] == "TerminateRunSuccess"
    by_eve = as_user(ui, "eve").graphql(REEXECUTE, {"parent": parent, "tags": []})["launchPipelineReexecution"]
    assert by_eve == {
        "__typename": "PythonError",
        "message": "Custody refused this run: eve may not ingest sales/products: "
        "it needs producer (sales-producers) or owner (sales-owners)",
    }
    by_alice = as_user(ui, "alice").graphql(REEXECUTE, {"parent": parent, "tags": []})["launchPipelineReexecution"]
    assert by_alice["__typename"] == "LaunchRunSuccess", by_alice
    instance = instance_for(settings)
    child = instance.get_run_by_id(by_alice["run"]["runId"])
    assert child is not None and child.tags["custody/requested_by"] == "alice" and child.parent_run_id == parent
    assert instance.get_run_by_id(parent).tags["custody/requested_by"] == "bob"
    decided = ledger_of(settings, child.run_id)
    assert [
        (e["actor"], e["details"]["method"], e["details"]["result"]) for e in decided if e["action"] == "session"
    ] == [("alice", "ldap-bind", "allowed")]


def ledger_of(settings: Settings, run_id: str) -> list[dict]:
    with Catalog.from_settings(settings, {}).reading() as session:
        found = session.exec(select(LedgerEntry).where(LedgerEntry.run_id == run_id)).all()
    return [{"actor": e.actor, "action": e.action, "details": json.loads(e.details)} for e in found]
