"""Who launched a run, as Custody's run coordinator establishes it when the daemon submits one: a
tick of a schedule or sensor the instance holds, or the signed-in user the service recorded for a
backfill; never a tag, which anyone who reaches Dagster's webserver can type. Each run is decided
on the test's own instance, as the daemon would submit it."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import dagster as dg
import pytest
from sqlmodel import col, select

from assets.coordinator import CustodyRunCoordinator
from assets.dagster_internals import BulkActionStatus, InstigatorType, PartitionBackfill, TickStatus
from assets.launch import instance_for
from assets.launchers import SignedLaunch
from governance.access.guard import record
from governance.access.policy import Decision, Identity, Verb
from governance.catalog.models import LedgerEntry
from governance.demo import drop_demo_batches
from governance.errors import AccessDenied
from governance.runs import Assurance
from governance.service.principal import signed_for, signed_principal
from governance.service.sessions import Principal, Sessions, SessionSettings, new_session_id
from governance.zones import Lake
from tests import ticks
from tests.helpers import os_user_is
from tests.ticks import SCHEDULED_AT, tick

NIGHTLY = "custody_ledger_maintenance_nightly"
MAINTENANCE = "custody_ledger_maintenance"
NOBODY = "no launch proves whom this run is for"
LAUNCH = b'{"query": "mutation { launchRun }"}'


@pytest.fixture
def instance(cli_env) -> dg.DagsterInstance:
    instance = instance_for(cli_env)
    assert isinstance(instance.run_coordinator, CustodyRunCoordinator)
    return instance


def submitted(instance, job: str = MAINTENANCE, run_id: str | None = None, writes: str | None = None, **tags: str):
    """A run the daemon created, before it submits it: of job `job`, or of the asset `writes`."""
    selection = frozenset({dg.AssetKey(writes.split("/"))}) if writes else None
    run = dg.DagsterRun(
        job_name="__ASSET_JOB" if writes else job,
        run_id=run_id or str(uuid.uuid4()),
        tags=tags,
        asset_selection=selection,
    )
    return instance.add_run(run)


def decided(instance, run: dg.DagsterRun) -> dg.DagsterRun:
    return instance.run_coordinator.admit(run)


def entries(catalog, **where: str) -> list[LedgerEntry]:
    with catalog.reading() as session:
        found = session.exec(select(LedgerEntry).order_by(col(LedgerEntry.seq)))
        return [e for e in found if all(getattr(e, k) == v for k, v in where.items())]


def refused(instance, run: dg.DagsterRun, said: str) -> LedgerEntry:
    """The run refused with `said`, deleted, and the refusal recorded as anonymous with the name claimed."""
    with pytest.raises(AccessDenied, match=said):
        decided(instance, run)
    assert instance.get_run_by_id(run.run_id) is None
    [entry] = entries(instance.run_coordinator.custody.catalog, run_id=run.run_id, action="session")
    assert (entry.actor, json.loads(entry.details)["result"]) == ("anonymous", "denied")
    return entry


def scheduled_tags(tick_id: str, name: str = NIGHTLY, at: datetime = SCHEDULED_AT) -> dict[str, str]:
    return ticks.scheduled_tags(tick_id, name, at)


def test_a_run_a_tick_of_its_schedule_launched_is_for_the_daemon_s_account_verified(instance, cli_env):
    os_user_is(cli_env, "alice")
    run = submitted(instance, **scheduled_tags(tick(instance, NIGHTLY, InstigatorType.SCHEDULE)))
    assert decided(instance, run).tags["custody/requested_by"] == "alice"
    [proof] = entries(instance.run_coordinator.custody.catalog, run_id=run.run_id, action="authenticate")
    said = json.loads(proof.details)
    assert (proof.actor, proof.assurance, said["method"], said["channel"]) == (
        "alice",
        "verified",
        "os-user",
        "schedule",
    )
    assert said["via"] == f"schedule {NIGHTLY}"


@pytest.mark.parametrize(
    "forged",
    ["no tick", "another schedule's tick", "a sensor's tick", "a tick that has ended", "another time's tick"],
)
def test_a_schedule_s_tags_without_the_tick_that_launched_the_run_prove_nobody(instance, cli_env, forged):
    os_user_is(cli_env, "alice")
    tick_id = {
        "no tick": lambda: "424242",
        "another schedule's tick": lambda: tick(instance, "another", InstigatorType.SCHEDULE),
        "a sensor's tick": lambda: tick(instance, NIGHTLY, InstigatorType.SENSOR),
        "a tick that has ended": lambda: tick(instance, NIGHTLY, InstigatorType.SCHEDULE, TickStatus.SUCCESS),
        "another time's tick": lambda: tick(instance, NIGHTLY, InstigatorType.SCHEDULE),
    }[forged]()
    at = datetime(2026, 12, 1, 2, 30, tzinfo=UTC) if forged == "another time's tick" else SCHEDULED_AT
    run = submitted(instance, **scheduled_tags(tick_id, at=at), **{"custody/requested_by": "alice"})
    assert json.loads(refused(instance, run, NOBODY).details)["claimed"] == "alice"


def test_a_backfill_s_run_with_a_schedule_s_tags_is_a_backfill_s_and_no_one_launched_it(instance, cli_env, monkeypatch):
    monkeypatch.setattr("assets.launchers.BACKFILL_WAIT_SECONDS", 0.5)
    os_user_is(cli_env, "alice")
    tags = {**scheduled_tags(tick(instance, NIGHTLY, InstigatorType.SCHEDULE)), "dagster/backfill": "forgedbf"}
    refused(instance, submitted(instance, **tags), "no signed-in user launched backfill forgedbf")


def backfill(instance, backfill_id: str) -> str:
    """A backfill the instance holds, as the webserver adds one."""
    instance.add_backfill(
        PartitionBackfill(
            backfill_id, BulkActionStatus.REQUESTED, from_failure=False, tags={}, backfill_timestamp=time.time()
        )
    )
    return backfill_id


def launched(catalog, user: str, backfill_id: str) -> None:
    """What the service records as `user` launches or re-executes the backfill, signed in."""
    identity = Identity(user, Assurance.VERIFIED, "password", "ui")
    decision = Decision(identity, Verb.SESSION, None, True, f"{user} launched it")
    record(catalog, decision, backfill_id, {"backfill": backfill_id, "mutation": "launchPartitionBackfill"})


def test_a_backfill_s_run_is_for_whoever_last_launched_or_re_executed_it_signed_in(instance):
    catalog, made = instance.run_coordinator.custody.catalog, backfill(instance, "bf000001")
    for user in ("bob", "alice"):
        launched(catalog, user, made)
    run = submitted(instance, **{"dagster/backfill": made, "custody/requested_by": "bob"})
    assert decided(instance, run).tags["custody/requested_by"] == "alice"
    [proof] = entries(catalog, run_id=run.run_id, action="session")
    assert (proof.actor, proof.assurance, json.loads(proof.details)["backfill"]) == ("alice", "verified", made)


def test_a_run_naming_a_backfill_the_instance_does_not_hold_proves_nobody_whoever_it_was_recorded_for(instance):
    launched(instance.run_coordinator.custody.catalog, "alice", "bf000002")
    run = submitted(instance, **{"dagster/backfill": "bf000002", "custody/requested_by": "alice"})
    refused(instance, run, "no signed-in user launched backfill bf000002")


def test_a_retry_the_daemon_makes_of_a_backfill_s_run_proves_nobody(instance):
    catalog, made = instance.run_coordinator.custody.catalog, backfill(instance, "bf000003")
    launched(catalog, "alice", made)
    run = submitted(instance, **{"dagster/backfill": made, "dagster/parent_run_id": "a-run-of-mallory"})
    refused(instance, run, NOBODY)


def test_a_dropzone_sensor_s_run_is_for_the_owner_of_its_batch_when_its_tick_reserved_the_run(
    instance, cli_env, folders_made_by_bob
):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    run_id = str(uuid.uuid4())
    tags = {
        "dagster/sensor_name": "custody_dropzone",
        "dagster/tick": tick(instance, "custody_dropzone", InstigatorType.SENSOR, reserved=[run_id]),
        "custody/batch": dropped.products_batch,
        "custody/requested_by": "bob",
    }
    run = submitted(instance, run_id=run_id, writes="sales/products", **tags)
    assert decided(instance, run).tags["custody/requested_by"] == "bob"
    [proof] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="authenticate")
    assert (proof.actor, json.loads(proof.details)["method"]) == ("bob", "folder-owner")


def test_a_dropzone_sensor_s_tags_on_a_run_its_tick_did_not_reserve_prove_nobody(
    instance, cli_env, folders_made_by_bob
):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    tags = {
        "dagster/sensor_name": "custody_dropzone",
        "dagster/tick": tick(instance, "custody_dropzone", InstigatorType.SENSOR, reserved=[str(uuid.uuid4())]),
        "custody/batch": dropped.products_batch,
        "custody/requested_by": "bob",
    }
    run = submitted(instance, writes="sales/products", **tags)
    refused(instance, run, NOBODY)


AUTOMATION = "custody_automation"


def automation_tags(instance, run_id: str, sensor: str = AUTOMATION, reserved: bool = True) -> dict[str, str]:
    """The tags the daemon gives a run its automation condition sensor's tick launched."""
    made = tick(instance, sensor, InstigatorType.SENSOR, reserved=[run_id if reserved else str(uuid.uuid4())])
    return {"dagster/sensor_name": sensor, "dagster/tick": made, "dagster/from_automation_condition": "true"}


def test_an_automation_condition_s_run_is_for_the_daemon_s_account_verified(instance, cli_env):
    os_user_is(cli_env, "bob")
    run_id = str(uuid.uuid4())
    run = submitted(instance, run_id=run_id, writes="sales/product_summary", **automation_tags(instance, run_id))
    assert decided(instance, run).tags["custody/requested_by"] == "bob"
    [proof] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="authenticate")
    said = json.loads(proof.details)
    assert (proof.actor, proof.assurance, said["method"], said["channel"], said["via"]) == (
        "bob",
        "verified",
        "os-user",
        "automation",
        f"sensor {AUTOMATION}",
    )
    [allowed] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="materialize")
    assert (allowed.actor, json.loads(allowed.details)["result"]) == ("bob", "allowed")


def test_an_automation_condition_s_run_is_refused_while_the_daemon_s_account_lacks_the_asset_s_role(instance, cli_env):
    os_user_is(cli_env, "svc-custody")
    run_id = str(uuid.uuid4())
    run = submitted(instance, run_id=run_id, writes="sales/product_summary", **automation_tags(instance, run_id))
    with pytest.raises(AccessDenied, match="svc-custody"):
        decided(instance, run)
    assert instance.get_run_by_id(run_id) is None
    [denied] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="materialize")
    assert (denied.actor, json.loads(denied.details)["result"]) == ("svc-custody", "denied")


def test_another_sensor_s_run_is_for_the_daemon_s_account_on_the_sensor_channel(instance, cli_env):
    os_user_is(cli_env, "bob")
    run_id = str(uuid.uuid4())
    tags = {
        "dagster/sensor_name": "orders_arrived",
        "dagster/tick": tick(instance, "orders_arrived", InstigatorType.SENSOR, reserved=[run_id]),
    }
    run = submitted(instance, run_id=run_id, writes="sales/product_summary", **tags)
    assert decided(instance, run).tags["custody/requested_by"] == "bob"
    [proof] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="authenticate")
    assert (json.loads(proof.details)["channel"], json.loads(proof.details)["via"]) == (
        "sensor",
        "sensor orders_arrived",
    )


@pytest.mark.parametrize("forged", ["a tick that did not reserve it", "another sensor's tick", "no tick"])
def test_an_automation_condition_s_tags_without_the_tick_that_reserved_the_run_prove_nobody(instance, cli_env, forged):
    os_user_is(cli_env, "bob")
    run_id = str(uuid.uuid4())
    tags = automation_tags(instance, run_id, reserved=forged != "a tick that did not reserve it")
    if forged == "another sensor's tick":
        tags["dagster/tick"] = tick(instance, "another", InstigatorType.SENSOR, reserved=[run_id])
    if forged == "no tick":
        tags["dagster/tick"] = "424242"
    run = submitted(instance, run_id=run_id, writes="sales/product_summary", **tags)
    refused(instance, run, NOBODY)


def test_an_automation_condition_s_run_naming_another_requester_is_refused_as_acting_as_them(instance, cli_env):
    os_user_is(cli_env, "bob")
    run_id = str(uuid.uuid4())
    tags = {**automation_tags(instance, run_id), "custody/requested_by": "alice"}
    run = submitted(instance, run_id=run_id, writes="sales/product_summary", **tags)
    with pytest.raises(AccessDenied, match="an automation condition's runs are for the account its daemon runs as"):
        decided(instance, run)
    [act_as] = entries(instance.run_coordinator.custody.catalog, run_id=run_id, action="act-as")
    assert (act_as.actor, json.loads(act_as.details)["as"]) == ("bob", "alice")


def test_a_re_execution_the_daemon_submits_proves_nobody_whoever_its_parent_was_for(instance, cli_env):
    os_user_is(cli_env, "alice")
    tags = {**scheduled_tags(tick(instance, NIGHTLY, InstigatorType.SCHEDULE)), "dagster/parent_run_id": "parent"}
    refused(instance, submitted(instance, **tags, **{"custody/requested_by": "alice"}), NOBODY)


class Request:
    """A request the webserver answers: what a header is taken once by."""


def launch_of(principal: Principal, request: object, header: str | None = None) -> SignedLaunch:
    header = header or signed_principal(principal, method="POST", body=LAUNCH)
    signed = signed_for(header, "POST", LAUNCH)
    assert signed is not None
    return SignedLaunch(signed, request)


def test_a_signed_request_launches_its_runs_and_no_other_request_carrying_its_header_does(instance):
    coordinator = instance.run_coordinator
    bob, _ = Sessions(coordinator.custody.catalog, SessionSettings.from_environ({})).open(new_session_id(), "bob", "pw")
    header, asked = signed_principal(bob, method="POST", body=LAUNCH), Request()
    for _ in range(2):  # a launch of several runs: each submitted in answer to the same request
        assert (
            coordinator.admit(submitted(instance), launch_of(bob, asked, header)).tags["custody/requested_by"] == "bob"
        )
    replayed = submitted(instance)
    with pytest.raises(AccessDenied, match="a request signed for bob was sent again: a signed request launches once"):
        coordinator.admit(replayed, launch_of(bob, Request(), header))
    assert instance.get_run_by_id(replayed.run_id) is None


def test_a_signed_request_launches_nothing_once_its_session_has_ended(instance):
    coordinator = instance.run_coordinator
    sessions = Sessions(coordinator.custody.catalog, SessionSettings.from_environ({}))
    bob, _ = sessions.open(new_session_id(), "bob", "pw")
    sessions.end(bob)
    run = submitted(instance)
    with pytest.raises(AccessDenied, match="the session of bob has ended: sign in again"):
        coordinator.admit(run, launch_of(bob, Request()))
    [entry] = entries(coordinator.custody.catalog, run_id=run.run_id, action="session")
    assert (entry.actor, json.loads(entry.details)["result"]) == ("bob", "denied")
