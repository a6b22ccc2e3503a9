"""The DropZone sensor: one ingestion run per ready batch, for the owner of the batch's folder as the
directory knows them (the OS user running the tests, mapped to bob, the producer, unless a test says
otherwise); `_batch.yaml` naming anyone else, or a file that is not the folder owner's alone or changed
after `_READY`, is refused; refusals recorded once."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable

import dagster as dg
import pytest

import governance.dropzone
from assets.dagster_internals import InstigatorType
from assets.definitions import definitions_for, defs
from assets.factory import build_assets
from assets.sensors import SENSOR
from governance import ledger
from governance.access.policy import Identity
from governance.access.settings import change_setting
from governance.batches import READY_MARKER, batch_stamp, mark_ready
from governance.config import Settings
from governance.demo import PRODUCTS, drop_demo_batches
from governance.errors import BatchError, InvalidInput
from governance.ingest import ingest
from governance.runs import Assurance, RunRequest, os_user
from tests.conftest import drop
from tests.helpers import (
    OTHER_USER,
    SHARED_GROUP,
    after_the_mark,
    assert_nothing_committed,
    given_to,
    os_user_is,
    rewritten_as_it_was_dated,
    written_as,
)
from tests.ticks import submitted_for_tick, tick

CSV = b"product_id,product_name,category,unit_price\nP1,Pen,office,1.50\n"
# A price that is no number: its row is quarantined, over the products' max_bad_fraction of 0.
BAD_CSV = b"product_id,product_name,category,unit_price\nP1,Pen,office,cheap\n"
# What another user puts in a batch that is not theirs: the same size, other rows.
THEIR_CSV = b"product_id,product_name,category,unit_price\nP9,Gun,office,0.01\n"


@pytest.fixture(autouse=True)
def batches_dropped_by_bob(settings) -> None:
    os_user_is(settings, "bob")


def map_os_user_to(catalog, settings, user: str) -> None:
    """An admin's change of the `os_users` setting: the OS user running the tests becomes `user`."""
    admin = Identity("alice", Assurance.VERIFIED)
    change_setting(catalog, settings, {}, admin, "os_users", f"{os_user()}={user}")


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture
def evaluate(demo_specs, resources, instance):
    """One tick of the sensor with the cursor the last tick left; returns its run requests and skip reason."""
    definitions = definitions_for(demo_specs)
    sensor = definitions.resolve_sensor_def(SENSOR)
    cursor: list[str | None] = [None]

    def tick() -> tuple[list[dg.RunRequest], str | None]:
        context = dg.build_sensor_context(
            instance=instance, cursor=cursor[0], resources=resources, definitions=definitions
        )
        result = sensor.evaluate_tick(context)
        cursor[0] = result.cursor
        return list(result.run_requests or []), result.skip_message

    return tick


@pytest.fixture
def launch(demo_specs, resources, instance):
    """Run a request in the sensor's instance as the daemon would: tagged with the sensor, its run key
    and the tick that reserved it, decided as Custody's run coordinator decides it, then executed."""
    job = dg.Definitions(assets=build_assets(demo_specs), resources=resources).resolve_implicit_global_asset_job_def()

    def run(request: dg.RunRequest, meanwhile: Callable[[], object] = lambda: None) -> dg.ExecuteInProcessResult:
        """`meanwhile`: what happens between the run's submission and its start."""
        run_id = str(uuid.uuid4())
        tags = {
            **request.tags,
            "dagster/sensor_name": SENSOR,
            "dagster/run_key": request.run_key,
            "dagster/tick": tick(instance, SENSOR, InstigatorType.SENSOR, reserved=[run_id]),
        }
        _, tags = submitted_for_tick(instance, resources["custody"], tags, demo_specs[PRODUCTS], run_id)
        meanwhile()
        return job.execute_in_process(
            instance=instance,
            run_id=run_id,
            tags=tags,
            asset_selection=request.asset_selection,
            run_config=request.run_config,
            raise_on_error=False,
        )

    return run


def refusals(catalog) -> list[tuple[str, str, str]]:
    with catalog.session() as session:
        found = ledger.entries(session, ledger.LedgerFilter(action="ingest"))
    return [(e.actor, json.loads(e.details)["batch"], json.loads(e.details)["reason"]) for e in found]


def test_the_code_location_s_sensor_ticks_every_30_seconds_or_as_custody_dropzone_sensor_seconds_says(
    cli_env, monkeypatch
):
    assert defs().resolve_sensor_def(SENSOR).minimum_interval_seconds == 30
    monkeypatch.setenv("CUSTODY_DROPZONE_SENSOR_SECONDS", "5")
    assert defs().resolve_sensor_def(SENSOR).minimum_interval_seconds == 5


@pytest.mark.parametrize("value", ["0", "-5", "2.5", "half a minute"])
def test_a_sensor_interval_that_is_not_a_whole_number_of_seconds_is_refused(value):
    with pytest.raises(InvalidInput) as refused:
        Settings.from_env({"CUSTODY_DROPZONE_SENSOR_SECONDS": value})
    assert (
        str(refused.value)
        == f"CUSTODY_DROPZONE_SENSOR_SECONDS={value!r}: expected a whole number of seconds, at least 1"
    )


def test_each_ready_batch_is_one_run_request_keyed_by_the_batch_for_its_requester(lake, evaluate):
    dropped = drop_demo_batches(lake)
    requests, _ = evaluate()
    by_key = {r.run_key.rpartition("@")[0]: r for r in requests}
    assert set(by_key) == {
        f"sales/products/{dropped.products_batch}",
        *(f"sales/clients/{batch}" for batch in dropped.client_batches),
    }
    products = by_key[f"sales/products/{dropped.products_batch}"]
    stamp = batch_stamp(lake, PRODUCTS, dropped.products_batch)
    assert products.run_key == f"sales/products/{dropped.products_batch}@{stamp}"
    assert products.tags["custody/requested_by"] == "bob"
    assert products.asset_selection == [dg.AssetKey(["sales", "products"])]
    assert products.run_config == {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}


def test_a_batch_without_ready_marker_or_already_ingested_is_not_requested(spark, catalog, lake, demo_specs, evaluate):
    from governance.ingest import ingest
    from governance.runs import RunRequest

    dropped = drop_demo_batches(lake)
    ingest(spark, catalog, lake, demo_specs[PRODUCTS], RunRequest(requested_by="bob"), batch_id=dropped.products_batch)
    folder = drop(lake, "sales/products", "half-written", {"products.csv": CSV}, requested_by="bob")
    (folder / READY_MARKER).unlink()
    requests, _ = evaluate()
    assert not [r for r in requests if r.run_key.startswith("sales/products/")]


def test_a_requester_who_may_not_ingest_is_refused_in_the_ledger_once(catalog, settings, lake, evaluate):
    map_os_user_to(catalog, settings, "eve")
    drop(lake, "sales/products", "from-eve", {"products.csv": CSV}, requested_by="eve")
    requests, skip = evaluate()
    assert requests == [] and skip == "no new ready batch; 1 refused batch(es) wait for a fix"
    reason = "eve may not ingest sales/products: it needs producer (sales-producers) or owner (sales-owners)"
    assert refusals(catalog) == [("eve", "from-eve", reason)]
    assert evaluate()[0] == []
    assert len(refusals(catalog)) == 1
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action="ingest"))
    details = json.loads(entry.details)
    assert (entry.assurance, details["method"], details["channel"]) == ("verified", "folder-owner", "sensor")
    assert (details["origin"], details["via"]) == (f"folder of OS user {os_user()}", f"sensor {SENSOR}")


def test_a_batch_whose_yaml_names_someone_else_than_its_folder_s_owner_is_refused(catalog, lake, evaluate):
    drop(lake, "sales/products", "for-alice", {"products.csv": CSV}, requested_by="alice")
    assert evaluate()[0] == []
    reason = (
        f"the batch names alice, but its folder belongs to OS user {os_user()}, bob in the directory: "
        "a batch is ingested for the owner of its folder"
    )
    assert refusals(catalog) == [("bob", "for-alice", reason)]


def test_a_batch_that_names_nobody_is_for_the_owner_of_its_folder(lake, evaluate):
    drop(lake, "sales/products", "unnamed", {"products.csv": CSV})
    [request] = evaluate()[0]
    assert (request.tags["custody/batch"], request.tags["custody/requested_by"]) == ("unnamed", "bob")


def test_the_run_of_a_batch_acts_for_its_folder_s_owner_verified(catalog, lake, evaluate, launch):
    drop(lake, "sales/products", "b1", {"products.csv": CSV}, requested_by="bob")
    [request] = evaluate()[0]
    assert launch(request).success
    [version] = catalog.versions(PRODUCTS)
    assert (version.requested_by, version.assurance) == ("bob", "verified")


def test_a_refused_batch_the_producer_fixes_is_requested_at_the_next_tick(catalog, lake, evaluate):
    folder = drop(lake, "sales/products", "fixed", {"products.csv": CSV}, requested_by="eve")
    assert evaluate()[0] == []
    (folder / "_batch.yaml").write_text("requested_by: bob\n")
    (folder / READY_MARKER).touch()
    [request] = evaluate()[0]
    assert (request.tags["custody/batch"], request.tags["custody/requested_by"]) == ("fixed", "bob")


@pytest.mark.parametrize(
    "meta, reason",
    [
        ("requested_by: [bob]\n", "requested_by: "),
        ('requested_by: "bob\'; DROP TABLE version;--"\n', "not a directory user name"),
    ],
)
def test_a_batch_whose_yaml_names_badly_is_refused_with_the_reason(catalog, lake, evaluate, meta, reason):
    folder = drop(lake, "sales/products", "b1", {"products.csv": CSV})
    (folder / "_batch.yaml").write_text(meta)
    assert evaluate()[0] == []
    [(actor, batch, said)] = refusals(catalog)
    assert (actor, batch) == ("anonymous", "b1") and reason in said


def test_a_batch_that_disappears_during_a_tick_is_left_out(lake, evaluate, monkeypatch):
    folder = drop(lake, "sales/products", "vanishing", {"products.csv": CSV}, requested_by="bob")
    listed = governance.dropzone.ready_batches

    def listed_then_removed(lake_, key):
        found = listed(lake_, key)
        if found:
            shutil.rmtree(folder)
        return found

    monkeypatch.setattr(governance.dropzone, "ready_batches", listed_then_removed)
    requests, _ = evaluate()
    assert not [r for r in requests if "vanishing" in r.run_key]


def test_a_batch_whose_run_failed_is_requested_again_once_its_producer_touches_ready(lake, evaluate, launch):
    folder = drop(lake, "sales/products", "b1", {"products.csv": BAD_CSV}, requested_by="bob")
    [first] = evaluate()[0]
    assert not launch(first).success
    (folder / "products.csv").write_bytes(CSV)
    (folder / READY_MARKER).touch()
    [again] = evaluate()[0]
    assert again.run_key != first.run_key and again.run_key.startswith("sales/products/b1@")
    assert launch(again).success


def test_a_tick_says_it_skips_a_batch_whose_run_failed_until_its_producer_touches_ready(lake, evaluate, launch):
    drop(lake, "sales/products", "b1", {"products.csv": BAD_CSV}, requested_by="bob")
    [first] = evaluate()[0]
    failed = launch(first)
    requests, skip = evaluate()
    assert requests == []
    assert skip == (
        f"sales/products/b1: its run {failed.run_id} ended FAILURE (see its log); fix the batch, then touch "
        "_READY to ingest it again; no new ready batch; 0 refused batch(es) wait for a fix"
    )


def ingestion_failures(catalog) -> list[tuple[str, str]]:
    with catalog.session() as session:
        found = ledger.entries(session, ledger.LedgerFilter(action=ledger.Action.INGESTION_FAILED))
    return [(e.actor, json.loads(e.details)["error"]) for e in found]


def test_a_batch_holding_a_file_another_os_user_owns_is_refused_in_the_ledger(catalog, lake, evaluate):
    folder = drop(lake, "sales/products", "b1", {"products.csv": CSV})
    given_to(folder / "products.csv")
    mark_ready(folder)
    requests, skip = evaluate()
    assert requests == [] and skip == "no new ready batch; 1 refused batch(es) wait for a fix"
    reason = f"{folder / 'products.csv'} is owned by {OTHER_USER}, not by {os_user()} who owns the batch's folder"
    assert refusals(catalog) == [("anonymous", "b1", reason)]


def test_a_batch_changed_after_its_run_was_requested_fails_that_run_and_lands_nothing(catalog, lake, evaluate, launch):
    folder = drop(lake, "sales/products", "b1", {"products.csv": CSV})
    [request] = evaluate()[0]

    def rewritten() -> None:
        after_the_mark(folder)
        rewritten_as_it_was_dated(folder / "products.csv", THEIR_CSV)

    assert not launch(request, meanwhile=rewritten).success
    reason = (
        f"{folder / 'products.csv'} changed after the batch was marked ready: touch {folder / READY_MARKER} "
        "again once the batch is complete"
    )
    assert ingestion_failures(catalog) == [("bob", reason)]
    assert_nothing_committed(catalog, lake, "sales/products")


def test_a_ready_batch_a_group_member_rewrites_in_a_group_writable_dropzone_is_refused_by_the_sensor_and_ingestion(
    spark, catalog, lake, demo_specs, evaluate
):
    """Root, bob in the directory, drops a batch in a DropZone its group shares, leaving its data file
    writable by the group, as a umask of 002 does; nobody, a member of the group, then rewrites it."""
    dropzone = lake.drop_dir(PRODUCTS)
    dropzone.mkdir(parents=True)
    given_to(dropzone, os_user(), SHARED_GROUP)
    dropzone.chmod(0o2775)
    folder = drop(lake, "sales/products", "b1", {"products.csv": CSV})
    (folder / "products.csv").chmod(0o664)
    mark_ready(folder)
    after_the_mark(folder)
    written_as(OTHER_USER, folder / "products.csv", THEIR_CSV, groups=[SHARED_GROUP])
    assert (folder / "products.csv").read_bytes() == THEIR_CSV
    assert os.stat(folder / "products.csv").st_uid == os.getuid()
    reason = (
        f"{folder / 'products.csv'} is writable by its group ({SHARED_GROUP}): a batch's files must be "
        "writable by their owner alone, so who wrote them is known"
    )

    assert evaluate()[0] == []
    assert refusals(catalog) == [("anonymous", "b1", reason)]
    with pytest.raises(BatchError) as refused:
        ingest(spark, catalog, lake, demo_specs[PRODUCTS], RunRequest(requested_by="bob"), batch_id="b1")
    assert str(refused.value) == reason
    assert ingestion_failures(catalog) == [("bob", reason)]
    assert_nothing_committed(catalog, lake, "sales/products")
