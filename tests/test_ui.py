"""What `make ui` shows: Dagster's own webserver on the shared instance, behind Custody's login, asked
through its GraphQL API by signed-in users.

The tests share two services, each on a home of its own: one without Dagster's daemon, where what a
test launches stays queued, and one with it. A test works on assets no other test on its home makes
versions of, and reads only the runs and ledger entries made since it began. The DropZone sensor's
test has a home of its own: the sensor would take every other test's batches."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg
import pytest
import requests

from assets.dagster_internals import BulkActionStatus
from assets.launch import instance_for
from governance.batches import batch_stamp
from governance.cli import run
from governance.config import Settings
from governance.demo import PRODUCTS, drop_demo_batches
from governance.zones import Lake
from tests.conftest import drop
from tests.dagster_servers import (
    Shared,
    SignedIn,
    client,
    finished,
    graphql,
    shared_service,
    start_daemon,
    stop,
    token,
)
from tests.helpers import recorded, run_proven, step_times

ASSETS_QUERY = """{ assetNodes { assetKey { path } groupName description kinds
  owners { ... on TeamAssetOwner { team } } tags { key value }
  assetMaterializations(limit: 1) { runId metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } ... on PathMetadataEntry { path } } } } }"""
RUNS_QUERY = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"


@pytest.fixture(scope="module")
def queued(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """The service without Dagster's daemon: a run launched from the UI stays queued."""
    with shared_service(tmp_path_factory.mktemp("queued") / "home") as shared:
        yield shared


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """The service with Dagster's daemon, which takes the runs off the queue."""
    with shared_service(tmp_path_factory.mktemp("running") / "home", daemon=True) as shared:
        yield shared


@pytest.fixture
def on_queued(queued: Shared, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return queued.for_cli(monkeypatch)


@pytest.fixture
def on_running(running: Shared, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return running.for_cli(monkeypatch)


def now() -> str:
    """This moment, for `custody ledger show --since`."""
    return datetime.now(UTC).isoformat()


def run_ids(instance: dg.DagsterInstance) -> set[str]:
    return {r.run_id for r in instance.get_runs()}


def test_the_ui_shows_specs_as_assets_and_cli_runs_with_their_versions(on_queued, spark, capsys, queued):
    before = run_ids(instance_for(on_queued))
    dropped = drop_demo_batches(Lake(on_queued.lake))
    assert run_proven(["ingest", "sales/products", "--batch", dropped.products_batch, "--as", "bob"]) == 0
    nodes = {"/".join(n["assetKey"]["path"]): n for n in graphql(queued.served, ASSETS_QUERY)["assetNodes"]}
    assert set(nodes) == {"sales/clients", "sales/products", "sales/names_and_products", "sales/product_summary"}
    products = nodes["sales/products"]
    assert products["groupName"] == "sales"
    assert products["owners"] == [{"team": "sales-owners"}]
    assert set(products["kinds"]) == {"spark", "parquet"}
    assert {"key": "custody/zone", "value": "landing"} in products["tags"]
    assert products["description"] == "The product catalogue with prices, delivered as CSV."
    metadata = {e["label"]: e for e in products["assetMaterializations"][0]["metadataEntries"]}
    assert metadata["custody/version"]["text"] == "sales/products@1"
    assert metadata["custody/rows_landed"]["intValue"] == 4 and metadata["custody/rows_quarantined"]["intValue"] == 0
    assert metadata["custody/path"]["path"].endswith("landing/sales/products/v=1")
    runs = [r for r in graphql(queued.served, RUNS_QUERY)["runsOrError"]["results"] if r["runId"] not in before]
    assert [r["status"] for r in runs] == ["SUCCESS"]
    assert {"key": "custody/requested_by", "value": "bob"} in runs[0]["tags"]


LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""


def launch_params(asset: list[str], config: dict | None = None, tags: dict[str, str] | None = None) -> dict:
    """The variables of the launchRun mutation the Materialize button and the Launchpad send."""
    return {
        "selector": {
            "repositoryLocationName": "custody",
            "repositoryName": "__repository__",
            "jobName": "__ASSET_JOB",
            "assetSelection": [{"path": asset}],
        },
        "runConfigData": config or {},
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]},
    }


def launch_answer(user: SignedIn, asset: list[str], config: dict, tags: dict[str, str] | None = None) -> dict:
    """What the UI's Launchpad gets back from the GraphQL launchRun mutation."""
    return user.graphql(LAUNCH, {"params": launch_params(asset, config, tags)})["launchRun"]


def launch_from_ui(user: SignedIn, asset: list[str], config: dict) -> str:
    answer = launch_answer(user, asset, config)
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return answer["run"]["runId"]


CHECK_EXECUTIONS = """{ assetCheckExecutions(assetKey: {path: ["sales", "products"]}, checkName: "files_intact", limit: 5) {
  runId status } }"""
PRODUCERS_ONLY = "it needs producer (sales-producers) or owner (sales-owners)"


def test_a_refused_ui_launch_shows_its_reason_and_leaves_no_run(on_queued, capsys, queued):
    since, instance = now(), instance_for(on_queued)
    runs, products = run_ids(instance), instance.get_latest_materialization_event(dg.AssetKey(["sales", "products"]))
    checks = graphql(queued.served, CHECK_EXECUTIONS)["assetCheckExecutions"]
    dropped = drop_demo_batches(Lake(on_queued.lake))
    config = {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}
    for user in ("eve", "dave"):
        answer = launch_answer(queued.served.as_user(user), ["sales", "products"], config)
        assert answer == {
            "__typename": "PythonError",
            "message": f"Custody refused this run: {user} may not ingest sales/products: {PRODUCERS_ONLY}",
        }
    assert run_ids(instance) == runs
    assert instance.get_latest_materialization_event(dg.AssetKey(["sales", "products"])) == products
    assert graphql(queued.served, CHECK_EXECUTIONS)["assetCheckExecutions"] == checks
    decisions = recorded(action="ingest", since=since)
    assert [(d["actor"], d["assurance"], d["details"]["result"]) for d in decisions] == [
        ("eve", "verified", "denied"),
        ("dave", "verified", "denied"),
    ]
    assert {d["details"]["at"] for d in decisions} == {"submission"}


def test_a_ui_launch_is_for_the_signed_in_user_and_a_tag_naming_another_is_refused(on_queued, capsys, queued):
    since, instance = now(), instance_for(on_queued)
    runs = run_ids(instance)
    dropped = drop_demo_batches(Lake(on_queued.lake))
    config = {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}
    eve = queued.served.as_user("eve")
    answer = launch_answer(eve, ["sales", "products"], config, {"custody/requested_by": "bob"})
    assert answer == {
        "__typename": "PythonError",
        "message": (
            "Custody refused this run: the run's custody/requested_by tag names bob, but eve launched it: "
            "a run is for the signed-in user who launches it"
        ),
    }
    forged = eve.post("/graphql", {"query": "{ version }"}, headers={"X-Custody-Principal": "bob"})
    assert forged.status_code == 200  # the header a client sends is dropped; the session says who asks
    assert run_ids(instance) == runs
    [refused] = recorded(action="session", since=since)
    assert (refused["actor"], refused["assurance"], refused["details"]["result"]) == ("eve", "verified", "denied")
    assert (refused["details"]["channel"], refused["details"]["method"]) == ("ui", "password")


def test_a_ui_materialize_of_a_landing_asset_without_a_ready_batch_is_refused_at_launch(on_running, capsys, running):
    """On the home with the daemon, where every test ingests each products batch it drops."""
    since, instance, lake = now(), instance_for(on_running), Lake(on_running.lake)
    runs, products = run_ids(instance), instance.get_latest_materialization_event(dg.AssetKey(["sales", "products"]))
    answer = launch_answer(running.served.as_user("bob"), ["sales", "products"], {})
    assert answer == {
        "__typename": "PythonError",
        "message": f"Custody refused this run: no ready batch of sales/products in {lake.drop_dir(PRODUCTS)}",
    }
    assert run_ids(instance) == runs
    assert instance.get_latest_materialization_event(dg.AssetKey(["sales", "products"])) == products
    [failed] = recorded(action="ingestion.failed", since=since)
    assert (failed["actor"], failed["details"]["at"], failed["details"]["error_type"]) == (
        "bob",
        "submission",
        "NotFound",
    )
    assert failed["details"]["error"] == f"no ready batch of sales/products in {lake.drop_dir(PRODUCTS)}"


BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
REEXECUTE_BACKFILL = """mutation($parent: String!) { again: reexecutePartitionBackfill(
  reexecutionParams: {parentRunId: $parent, strategy: ALL_STEPS}) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""


def backfill_of(user: SignedIn, asset: list[str], tags: dict[str, str] | None = None) -> str:
    """The id of a backfill of `asset` that `user` launches from the UI, with `tags` typed for it."""
    params = {
        "assetSelection": [{"path": asset}],
        "allPartitions": True,
        "tags": [{"key": key, "value": value} for key, value in (tags or {}).items()],
    }
    launched = user.graphql(BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return str(launched["backfillId"])


def test_a_ui_backfill_is_recorded_under_its_id_as_its_launcher_s_whatever_tag_was_typed(on_queued, capsys, queued):
    since = now()
    backfill = backfill_of(
        queued.served.as_user("bob"), ["sales", "names_and_products"], {"custody/requested_by": "alice"}
    )
    [entry] = [e for e in recorded(action="session", since=since) if e["run_id"] == backfill]
    assert (entry["actor"], entry["assurance"], entry["details"]["result"]) == ("bob", "verified", "allowed")
    assert (entry["details"]["channel"], entry["details"]["backfill"], entry["details"]["mutation"]) == (
        "ui",
        backfill,
        "launchPartitionBackfill",
    )


def backfill_runs(instance: dg.DagsterInstance, backfill: str, daemon: subprocess.Popen, seconds: float = 180):
    """The backfill's runs once it has ended, as the daemon left them."""
    deadline = time.monotonic() + seconds
    while not (found := instance.get_backfill(backfill)) or found.status.value not in (
        "COMPLETED",
        "COMPLETED_SUCCESS",
        "COMPLETED_FAILED",
        "FAILED",
        "CANCELED",
    ):
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, (
            f"backfill {backfill} did not end in {seconds:g} s: {found and found.status}"
        )
        time.sleep(0.5)
    return instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill}))


CANCEL_BACKFILL = """mutation($id: String!) { cancelPartitionBackfill(backfillId: $id) {
  __typename ... on PythonError { message } } }"""


def refusals_since(since: str, user: str, action: str, seconds: float = 120) -> list[dict]:
    """The refusals of `action` recorded for `user` since `since`, once there is one."""
    deadline = time.monotonic() + seconds
    while True:
        found = [e for e in recorded(action=action, actor=user, since=since) if e["details"]["result"] == "denied"]
        if found:
            return found
        assert time.monotonic() < deadline, f"no refusal of {action} for {user} in {seconds:g} s"
        time.sleep(1)


def test_a_backfill_re_executed_by_another_user_runs_for_them_or_not_at_all(on_running, spark, capsys, running):
    drop_demo_batches(Lake(on_running.lake))
    for args in (
        ["ingest", "sales/products"],
        ["ingest", "sales/clients"],
        ["materialize", "key:sales/names_and_products"],
    ):
        assert run_proven([*args, "--as", "bob"]) == 0
    instance = instance_for(on_running)
    first = backfill_of(running.served.as_user("bob"), ["sales", "product_summary"])
    # Ended as the daemon would end it, without the half a minute it takes to look at backfills: only
    # an ended backfill is re-executed, and its own run is not what this test is about.
    instance.update_backfill(instance.get_backfill(first).with_status(BulkActionStatus.COMPLETED_SUCCESS))
    capsys.readouterr()
    assert run(["versions", "sales/product_summary", "--json"]) in (0, 4)
    made = len(json.loads(capsys.readouterr().out or "[]"))
    since = now()
    again = {
        user: running.served.as_user(user).graphql(REEXECUTE_BACKFILL, {"parent": first})["again"]
        for user in ("eve", "alice")
    }
    assert {answer["__typename"] for answer in again.values()} == {"LaunchBackfillSuccess"}, again
    [refused, *_] = refusals_since(since, "eve", "materialize")
    assert refused["asset_key"] == "sales/product_summary" and refused["assurance"] == "verified"
    # Its launcher stops the backfill the daemon would try again.
    cancelled = running.served.as_user("eve").graphql(CANCEL_BACKFILL, {"id": again["eve"]["backfillId"]})
    assert cancelled["cancelPartitionBackfill"] == {"__typename": "CancelBackfillSuccess"}
    [alice_s] = backfill_runs(instance, again["alice"]["backfillId"], running.daemon)
    assert alice_s.is_success and alice_s.tags["custody/requested_by"] == "alice"
    capsys.readouterr()
    assert run(["versions", "sales/product_summary", "--json"]) == 0
    versions = json.loads(capsys.readouterr().out)
    assert len(versions) == made + 1 and versions[-1]["requested_by"] == "alice"
    assert (
        recorded(actor="bob", asset="sales/product_summary", since=since) == []
    )  # nothing after the first backfill was bob's


def test_a_ui_launch_and_an_api_request_queue_run_one_after_the_other_and_each_is_for_its_launcher(
    on_running, capsys, running, tmp_path
):
    since, lake, api = now(), Lake(on_running.lake), running.served.api
    batches = [drop_demo_batches(lake).products_batch for _ in range(2)]
    refused = requests.post(
        f"{api}/runs", json={"assets": ["sales/products"], "batch": batches[1]}, headers=token(api, "eve"), timeout=120
    )
    assert (refused.status_code, refused.json()["detail"]) == (
        403,
        f"eve may not ingest sales/products: {PRODUCERS_ONLY}",
    )
    config = {"ops": {"sales__products": {"config": {"batch": batches[0]}}}}
    from_ui = launch_from_ui(running.served.as_user("bob"), ["sales", "products"], config)
    # A client that holds no credential asks the service, then follows its run until it ends.
    assert client(api, tmp_path, "login", "bob", "--password-stdin", stdin="bob-demo\n").returncode == 0
    ingested = client(api, tmp_path, "ingest", "sales/products", "--batch", batches[1], "--json")
    assert ingested.returncode == 0, ingested.stderr
    outcome = json.loads(ingested.stdout)
    assert outcome["success"] and outcome["versions"][0].startswith("sales/products@")
    launched = [from_ui, outcome["run_id"]]
    instance = instance_for(on_running)
    done = [finished(instance, run_id, running.daemon) for run_id in launched]
    assert all(r.is_success for r in done) and {r.tags["custody/requested_by"] for r in done} == {"bob"}
    assert all(r.tags["custody/domain/sales"] == "1" for r in done)
    first, second = sorted(step_times(instance, run_id) for run_id in launched)
    assert first[1] <= second[0]  # sales/products' pool holds one step at a time
    state = requests.get(f"{api}/runs/{outcome['run_id']}", headers=token(api, "carol"), timeout=30).json()
    assert (state["status"], state["requested_by"], state["versions"]) == ("SUCCESS", "bob", outcome["versions"])
    decisions = [d for d in recorded(action="ingest", since=since) if d["run_id"] in launched]
    assert sorted((d["run_id"], d["details"].get("at", "start")) for d in decisions) == sorted(
        (run_id, at) for run_id in launched for at in ("submission", "start")
    )
    assert {(d["actor"], d["assurance"], d["details"]["result"]) for d in decisions} == {("bob", "verified", "allowed")}
    sessions = {
        d["run_id"]: d["details"]["channel"] for d in recorded(action="session", since=since) if d["actor"] == "bob"
    }
    assert (sessions[from_ui], sessions[outcome["run_id"]]) == ("ui", "api")
    assert run(["versions", "sales/products", "--json"]) == 0
    number = int(outcome["versions"][0].partition("@")[2])
    [version] = [v for v in json.loads(capsys.readouterr().out) if v["number"] == number]
    assert (version["requested_by"], version["assurance"]) == ("bob", "verified")


def test_a_run_request_the_service_cannot_take_gets_one_clear_message(running):
    api, headers = running.served.api, token(running.served.api, "bob")
    for body, status, said in (
        ({"selection": "key:sales/nope"}, 404, "selection 'key:sales/nope' matches no asset"),
        (
            {"assets": ["sales/names_and_products"], "batch": "b1"},
            400,
            "sales/names_and_products is an integration asset",
        ),
        (
            {"assets": ["sales/products"], "selection": "*"},
            400,
            "body: give the assets to run or a selection",
        ),
    ):
        answer = requests.post(f"{api}/runs", json=body, headers=headers, timeout=120)
        assert (answer.status_code, answer.json()["detail"][: len(said)]) == (status, said), answer.text
    unknown = requests.get(f"{api}/runs/0b6c3f9e-8d6f-4a8e-9a51-3f7c6bb4a1de", headers=headers, timeout=30)
    assert unknown.status_code == 404


def runs_launched(instance, count: int, daemon: subprocess.Popen, seconds: float = 120) -> list[dg.DagsterRun]:
    deadline = time.monotonic() + seconds
    while len(runs := instance.get_runs()) < count:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"{count} runs were not launched in {seconds:g} s"
        time.sleep(0.5)
    return runs


PRODUCTS_CSV = b"product_id,product_name,category,unit_price\nP9,Cup,home,2.00\n"
SENSOR_TICKS = """{ sensorOrError(sensorSelector: {repositoryLocationName: "custody", repositoryName: "__repository__",
  sensorName: "custody_dropzone"}) { ... on Sensor { sensorState { status ticks(limit: 50) { id status } } } } }"""


def sensor_ticks(served) -> set[str]:
    """The sensor's ticks that ended, among its newest 50."""
    state = graphql(served, SENSOR_TICKS)["sensorOrError"]["sensorState"]
    assert state["status"] == "RUNNING"
    return {tick["id"] for tick in state["ticks"] if tick["status"] in ("SUCCESS", "SKIPPED")}


def test_the_dropzone_sensor_ingests_each_ready_batch_once_and_refuses_once_across_restarts(
    cli_env, folders_made_by_bob, capsys, webserver, daemon
):
    lake = Lake(cli_env.lake)
    drop(lake, "sales/products", "from-bob", {"products.csv": PRODUCTS_CSV}, requested_by="bob")
    drop(lake, "sales/products", "from-eve", {"products.csv": PRODUCTS_CSV}, requested_by="eve")
    folder = drop(lake, "sales/products", "half-written", {"products.csv": PRODUCTS_CSV}, requested_by="bob")
    (folder / "_READY").unlink()
    instance = instance_for(cli_env)
    [launched] = runs_launched(instance, 1, daemon)
    assert finished(instance, launched.run_id, daemon).is_success
    assert (launched.tags["dagster/run_key"], launched.tags["custody/requested_by"]) == (
        f"sales/products/from-bob@{batch_stamp(lake, PRODUCTS, 'from-bob')}",
        "bob",
    )
    ticks = sensor_ticks(webserver)
    stop(daemon)
    again = start_daemon(cli_env)
    try:
        deadline = time.monotonic() + 120
        while not sensor_ticks(webserver) - ticks:
            assert time.monotonic() < deadline, "the sensor did not tick again within 120 s of the restart"
            time.sleep(1)
        assert len(instance.get_runs()) == 1
    finally:
        stop(again)
    refused = [d for d in recorded(action="ingest") if d["details"]["result"] == "denied"]
    assert [(d["actor"], d["details"]["batch"], d["details"]["via"]) for d in refused] == [
        ("bob", "from-eve", "sensor custody_dropzone")  # bob's folder, which names eve
    ]


REEXECUTE = """mutation($parent: String!, $tags: [ExecutionTag!]) { launchPipelineReexecution(
  reexecutionParams: {parentRunId: $parent, strategy: ALL_STEPS, extraTags: $tags}) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""


def reexecute(user: SignedIn, parent: str, tags: dict[str, str] | None = None) -> dict:
    variables = {"parent": parent, "tags": [{"key": k, "value": v} for k, v in (tags or {}).items()]}
    return user.graphql(REEXECUTE, variables)["launchPipelineReexecution"]


def test_a_run_the_cli_launched_is_re_executed_from_the_ui_for_the_user_who_re_executes_it(
    on_running, spark, capsys, running
):
    drop_demo_batches(Lake(on_running.lake))
    instance = instance_for(on_running)
    assert run(["versions", "sales/names_and_products", "--json"]) in (0, 4)
    made = len(json.loads(capsys.readouterr().out or "[]"))
    for args in (
        ["ingest", "sales/products"],
        ["ingest", "sales/clients"],
        ["materialize", "key:sales/names_and_products"],
    ):
        assert run_proven([*args, "--as", "bob"]) == 0
    parent = next(  # the newest, which this test launched
        r for r in instance.get_runs() if r.asset_selection == {dg.AssetKey(["sales", "names_and_products"])}
    )
    # A new input version, so the re-execution makes a version of its own.
    assert run_proven(["ingest", "sales/clients", "--as", "bob"]) == 0
    runs = len(instance.get_runs())
    as_eve = reexecute(running.served.as_user("eve"), parent.run_id)
    assert as_eve == {
        "__typename": "PythonError",
        "message": (
            "Custody refused this run: eve may not materialize sales/names_and_products: "
            "it needs producer (sales-producers) or owner (sales-owners)"
        ),
    }
    assert len(instance.get_runs()) == runs
    answer = reexecute(running.served.as_user("alice"), parent.run_id)
    assert answer["__typename"] == "LaunchRunSuccess", answer
    child = finished(instance, answer["run"]["runId"], running.daemon)
    assert child.is_success and child.parent_run_id == parent.run_id
    assert child.tags["custody/requested_by"] == "alice"
    capsys.readouterr()
    assert run(["versions", "sales/names_and_products", "--json"]) == 0
    versions = json.loads(capsys.readouterr().out)
    assert [(v["number"], v["requested_by"]) for v in versions[made:]] == [(made + 1, "bob"), (made + 2, "alice")]


def test_a_ui_re_execution_of_a_cli_run_is_the_signed_in_user_s_and_names_no_process(on_queued, spark, capsys, queued):
    instance = instance_for(on_queued)
    before = run_ids(instance)
    dropped = drop_demo_batches(Lake(on_queued.lake))
    assert run_proven(["ingest", "sales/clients", "--batch", dropped.client_batches[0], "--as", "bob"]) == 0
    [parent] = [r for r in instance.get_runs() if r.run_id not in before]
    process_tags = {"custody/launched_from", "custody/pid", "custody/host"}
    assert not process_tags & set(parent.tags)
    answer = reexecute(queued.served.as_user("bob"), parent.run_id)
    assert answer["__typename"] == "LaunchRunSuccess", answer
    child = instance.get_run_by_id(answer["run"]["runId"])
    assert child.parent_run_id == parent.run_id and child.tags["custody/requested_by"] == "bob"
    assert not process_tags & set(child.tags)


DROPZONE = {"repositoryLocationName": "custody", "repositoryName": "__repository__", "sensorName": "custody_dropzone"}
SENSOR_STATE = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor {
  id jobOriginId sensorState { selectorId status } } } }"""
START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
  __typename ... on Sensor { sensorState { status } } } }"""
STOP_SENSOR = """mutation($id: String, $origin: String, $selector: String) {
  stopSensor(id: $id, jobOriginId: $origin, jobSelectorId: $selector) {
  __typename ... on StopSensorMutationResult { instigationState { status } } } }"""


def test_only_a_verified_admin_starts_or_stops_a_sensor_and_each_attempt_is_recorded(on_queued, capsys, queued):
    since, served = now(), queued.served
    sensor = served.as_user("carol").graphql(SENSOR_STATE, {"s": DROPZONE})["sensorOrError"]
    was = sensor["sensorState"]["status"]
    toggle = {
        "query": START_SENSOR if was == "STOPPED" else STOP_SENSOR,
        "variables": {"s": DROPZONE}
        if was == "STOPPED"
        else {"id": sensor["id"], "origin": sensor["jobOriginId"], "selector": sensor["sensorState"]["selectorId"]},
    }
    refused = served.as_user("bob").post("/graphql", toggle)
    assert refused.status_code == 403
    assert refused.json()["errors"] == [
        {
            "message": "Custody refused this: bob may not change what Dagster runs or keeps: it needs the admin "
            "group custody-admins"
        }
    ]
    assert (
        served.as_user("carol").graphql(SENSOR_STATE, {"s": DROPZONE})["sensorOrError"]["sensorState"]["status"] == was
    )
    allowed = served.as_user("alice").post("/graphql", toggle)
    assert allowed.status_code == 200, allowed.text
    assert (
        served.as_user("carol").graphql(SENSOR_STATE, {"s": DROPZONE})["sensorOrError"]["sensorState"]["status"] != was
    )
    decided = [
        (e["actor"], e["assurance"], e["details"]["result"], e["details"]["mutation"])
        for e in recorded(action="control", since=since)
    ]
    mutation = "startSensor" if was == "STOPPED" else "stopSensor"
    assert decided == [("bob", "verified", "denied", mutation), ("alice", "verified", "allowed", mutation)]


def test_a_mutation_in_a_fragment_or_under_an_alias_is_decided_as_itself(on_queued, queued):
    hidden = """mutation { ...Quiet } fragment Quiet on Mutation {
      nothing: setAutoMaterializePaused(paused: true) } """
    refused = queued.served.as_user("bob").post("/graphql", {"query": hidden})
    assert refused.status_code == 403 and "bob may not change what Dagster runs or keeps" in refused.text


DRY_RUN = """mutation($s: SensorSelector!) { sensorDryRun(selectorData: $s, cursor: null) { __typename } }"""
RESUME = """mutation($id: String!) { resumePartitionBackfill(backfillId: $id) { __typename } }"""
NOT_AN_ADMIN = "may not change what Dagster runs or keeps: it needs the admin group custody-admins"


def test_dry_runs_asset_event_reports_and_another_s_backfill_are_an_admin_s_to_ask(on_queued, queued):
    bob, carol = queued.served.as_user("bob"), queued.served.as_user("carol")
    asked = {
        "a dry run": carol.post("/graphql", {"query": DRY_RUN, "variables": {"s": DROPZONE}}),
        "an asset event": carol.http.post(f"{carol.base}/report_asset_materialization/sales/products", timeout=30),
        "another's backfill": carol.post(
            "/graphql", {"query": RESUME, "variables": {"id": backfill_of(bob, ["sales", "names_and_products"])}}
        ),
    }
    for what, answer in asked.items():
        assert answer.status_code == 403 and f"carol {NOT_AN_ADMIN}" in answer.text, (what, answer.text)
    unread = carol.post("/graphql", {"query": "mutation { stopSensor("})
    assert unread.status_code == 400 and "does not parse" in unread.json()["detail"]
