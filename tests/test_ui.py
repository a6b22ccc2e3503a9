"""What `make ui` shows: Dagster's own webserver on the shared instance, asked through its GraphQL API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request

import dagster as dg

from assets.launch import instance_for
from governance.cli import run
from governance.demo import drop_demo_batches
from governance.zones import Lake
from tests.conftest import drop
from tests.dagster_servers import finished, graphql, start_daemon, stop

ASSETS_QUERY = """{ assetNodes { assetKey { path } groupName description kinds
  owners { ... on TeamAssetOwner { team } } tags { key value }
  assetMaterializations(limit: 1) { runId metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } ... on PathMetadataEntry { path } } } } }"""
RUNS_QUERY = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"


def test_the_ui_shows_specs_as_assets_and_cli_runs_with_their_versions(cli_env, spark, capsys, webserver):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    assert run(["ingest", "sales/products", "--batch", dropped.products_batch, "--as", "bob"]) == 0
    nodes = {"/".join(n["assetKey"]["path"]): n for n in graphql(webserver, ASSETS_QUERY)["assetNodes"]}
    assert set(nodes) == {"sales/clients", "sales/products", "sales/names_and_products", "sales/product_summary"}
    products = nodes["sales/products"]
    assert products["groupName"] == "sales"
    assert products["owners"] == [{"team": "sales-owners"}]
    assert set(products["kinds"]) == {"spark", "parquet"}
    assert {"key": "custody/zone", "value": "landing"} in products["tags"]
    assert products["description"] == "The product catalogue with prices, delivered as CSV."
    metadata = {e["label"]: e for e in products["assetMaterializations"][0]["metadataEntries"]}
    assert metadata["custody/version"]["text"] == "sales/products@1"
    assert metadata["rows_landed"]["intValue"] == 4 and metadata["rows_quarantined"]["intValue"] == 0
    assert metadata["path"]["path"].endswith("landing/sales/products/v=1")
    runs = graphql(webserver, RUNS_QUERY)["runsOrError"]["results"]
    assert [r["status"] for r in runs] == ["SUCCESS"]
    assert {"key": "custody/requested_by", "value": "bob"} in runs[0]["tags"]


LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""


def launch_answer(port: int, asset: list[str], config: dict, tags: dict[str, str]) -> dict:
    """What the UI's Launchpad gets back from the GraphQL launchRun mutation."""
    params = {
        "selector": {"repositoryLocationName": "custody", "repositoryName": "__repository__",
                     "jobName": "__ASSET_JOB", "assetSelection": [{"path": asset}]},
        "runConfigData": config,
        "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": LAUNCH, "variables": {"params": params}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["data"]["launchRun"]
    except urllib.error.HTTPError as err:  # the webserver answers an error with HTTP 500, and the error
        return json.load(err)["data"]["launchRun"]


def launch_from_ui(port: int, asset: list[str], config: dict, tags: dict[str, str]) -> str:
    answer = launch_answer(port, asset, config, tags)
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return answer["run"]["runId"]


PRODUCERS_ONLY = "it needs producer (sales-producers) or owner (sales-owners)"
REFUSED = {
    "": "the request names no user: say who asks (custody/requested_by run tag, --as or --by)",
    "eve": f"eve may not ingest sales/products: {PRODUCERS_ONLY}",
    "mallory": f"mallory may not ingest sales/products: {PRODUCERS_ONLY}",
    "bob'); DROP TABLE runs;--": "user",
}


def test_a_refused_ui_launch_shows_its_reason_and_leaves_no_run(cli_env, capsys, webserver):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    config = {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}
    for requester, reason in REFUSED.items():
        tags = {"custody/requested_by": requester} if requester else {}
        answer = launch_answer(webserver, ["sales", "products"], config, tags)
        assert answer["__typename"] == "PythonError", answer
        assert answer["message"].startswith("Custody refused this run: ")
        assert reason in answer["message"] and "\n" not in answer["message"]
    instance = instance_for(cli_env)
    assert instance.get_runs() == []
    assert not instance.get_latest_materialization_event(dg.AssetKey(["sales", "products"]))
    assert run(["ledger", "show", "--action", "ingest", "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)
    assert [d["details"]["result"] for d in decisions] == ["denied"] * len(REFUSED)
    assert {d["details"]["at"] for d in decisions} == {"submission"}
    assert [d["actor"] for d in decisions[1:3]] == ["eve", "mallory"]


def test_an_allowed_ui_launch_queues_and_runs_as_its_requester(cli_env, capsys, webserver, queue_only):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    config = {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}
    run_id = launch_from_ui(webserver, ["sales", "products"], config, {"custody/requested_by": "bob"})
    done = finished(instance_for(cli_env), run_id, queue_only)
    assert done.is_success
    assert done.tags["custody/writes/sales/products"] == "1" and done.tags["custody/domain/sales"] == "1"
    assert run(["ledger", "show", "--action", "ingest", "--json"]) == 0
    decisions = json.loads(capsys.readouterr().out)
    assert [(d["actor"], d["run_id"], d["details"]["result"], d["details"].get("at")) for d in decisions] == [
        ("bob", run_id, "allowed", "submission"), ("bob", run_id, "allowed", None)]


def test_two_runs_of_one_asset_run_one_after_the_other(cli_env, webserver, queue_only):
    lake = Lake(cli_env.lake)
    batches = [drop_demo_batches(lake).products_batch for _ in range(2)]
    run_ids = [
        launch_from_ui(webserver, ["sales", "products"], {"ops": {"sales__products": {"config": {"batch": batch}}}},
                       {"custody/requested_by": "bob"})
        for batch in batches
    ]
    instance = instance_for(cli_env)
    assert all(finished(instance, run_id, queue_only).is_success for run_id in run_ids)
    first, second = sorted((instance.get_run_record_by_id(run_id) for run_id in run_ids), key=lambda r: r.start_time)
    assert second.start_time >= first.end_time


SENSOR_TICKS = """{ sensorOrError(sensorSelector: {repositoryLocationName: "custody", repositoryName: "__repository__",
  sensorName: "custody_dropzone"}) { ... on Sensor { sensorState { status ticks(limit: 50) { status } } } } }"""


def sensor_ticks(port: int) -> int:
    state = graphql(port, SENSOR_TICKS)["sensorOrError"]["sensorState"]
    assert state["status"] == "RUNNING"
    return sum(1 for tick in state["ticks"] if tick["status"] in ("SUCCESS", "SKIPPED"))


def test_the_dropzone_sensor_ingests_each_ready_batch_once_and_refuses_once_across_restarts(
        cli_env, capsys, webserver, daemon):
    lake = Lake(cli_env.lake)
    dropped = drop_demo_batches(lake)
    drop(lake, "sales/products", "from-eve", {"products.csv": b"product_id,product_name,category,unit_price\nP9,Cup,home,2.00\n"},
         requested_by="eve")
    instance = instance_for(cli_env)
    deadline = time.monotonic() + 240
    while len([r for r in instance.get_runs() if r.is_finished]) < 3:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"3 runs did not finish in 240 s: {[r.status for r in instance.get_runs()]}"
        time.sleep(1)
    runs = instance.get_runs()
    assert all(r.is_success for r in runs)
    assert sorted(r.tags["dagster/run_key"] for r in runs) == sorted(
        [f"sales/products/{dropped.products_batch}", *(f"sales/clients/{b}" for b in dropped.client_batches)])
    assert {r.tags["custody/requested_by"] for r in runs} == {"bob"}
    ticks = sensor_ticks(webserver)
    stop(daemon)
    again = start_daemon(cli_env)
    try:
        deadline = time.monotonic() + 120
        while sensor_ticks(webserver) <= ticks:
            assert time.monotonic() < deadline, "the sensor did not tick again within 120 s of the restart"
            time.sleep(1)
        assert len(instance.get_runs()) == 3
    finally:
        stop(again)
    assert run(["ledger", "show", "--action", "ingest", "--json"]) == 0
    refused = [d for d in json.loads(capsys.readouterr().out) if d["details"]["result"] == "denied"]
    assert [(d["actor"], d["details"]["batch"], d["details"]["via"]) for d in refused] == [
        ("eve", "from-eve", "sensor custody_dropzone")]


def runs_launched(instance, count: int, daemon: subprocess.Popen, seconds: float = 120) -> list[dg.DagsterRun]:
    deadline = time.monotonic() + seconds
    while len(runs := instance.get_runs()) < count:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"{count} runs were not launched in {seconds:g} s"
        time.sleep(0.5)
    return runs


REEXECUTE = """mutation($parent: String!) { launchPipelineReexecution(reexecutionParams: {parentRunId: $parent, strategy: ALL_STEPS}) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""


def test_a_run_the_cli_launched_is_re_executed_from_the_ui_for_the_same_requester(cli_env, capsys, webserver, daemon):
    drop_demo_batches(Lake(cli_env.lake))
    instance = instance_for(cli_env)
    ingested_by_the_sensor = [finished(instance, r.run_id, daemon) for r in runs_launched(instance, 3, daemon)]
    assert all(r.is_success for r in ingested_by_the_sensor)
    assert run(["materialize", "key:sales/names_and_products", "--as", "bob"]) == 0
    parent = next(r for r in instance.get_runs() if r.asset_selection == {dg.AssetKey(["sales", "names_and_products"])})
    request = urllib.request.Request(
        f"http://127.0.0.1:{webserver}/graphql", headers={"Content-Type": "application/json"},
        data=json.dumps({"query": REEXECUTE, "variables": {"parent": parent.run_id}}).encode(),
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)["data"]["launchPipelineReexecution"]
    assert answer["__typename"] == "LaunchRunSuccess", answer
    child = finished(instance, answer["run"]["runId"], daemon)
    assert child.is_success and child.parent_run_id == parent.run_id
    assert child.tags["custody/requested_by"] == "bob"
    capsys.readouterr()
    assert run(["versions", "sales/names_and_products", "--json"]) == 0
    assert [v["number"] for v in json.loads(capsys.readouterr().out)] == [1, 2]
