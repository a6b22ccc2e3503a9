"""What `make ui` shows: Dagster's own webserver on the shared instance, asked through its GraphQL API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from assets.launch import instance_for
from governance.cli import run
from governance.demo import drop_demo_batches
from governance.zones import Lake
from tests.conftest import ROOT

WEBSERVER = Path(sys.executable).with_name("dagster-webserver")
ASSETS_QUERY = """{ assetNodes { assetKey { path } groupName description kinds
  owners { ... on TeamAssetOwner { team } } tags { key value }
  assetMaterializations(limit: 1) { runId metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on TextMetadataEntry { text } ... on PathMetadataEntry { path } } } } }"""
RUNS_QUERY = "{ runsOrError { ... on Runs { results { runId status tags { key value } } } } }"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


@pytest.fixture
def webserver(cli_env):
    instance_for(cli_env)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(cli_env.dagster_home)}
    server = subprocess.Popen(
        [str(WEBSERVER), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            break
        except OSError:
            if server.poll() is not None:
                raise AssertionError(f"webserver exited: {server.stderr.read()[-2000:]}") from None
            assert time.monotonic() < deadline, "webserver did not start in 120 s"
            time.sleep(0.5)
    yield port
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


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


def launch_from_ui(port: int, asset: list[str], config: dict, tags: dict[str, str]) -> str:
    """Launch a run as the UI's Launchpad does: the GraphQL launchRun mutation."""
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
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.load(response)["data"]["launchRun"]
    assert answer["__typename"] == "LaunchRunSuccess", answer
    return answer["run"]["runId"]


@pytest.fixture
def daemon(cli_env):
    """Dagster's daemon, as `make ui` (dagster dev) starts it: it takes runs off the UI's queue."""
    env = {**os.environ, "DAGSTER_HOME": str(cli_env.dagster_home)}
    process = subprocess.Popen(
        [str(WEBSERVER.with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
        cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    yield process
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def test_a_ui_run_without_the_role_fails_with_the_reason_before_spark_starts(cli_env, capsys, webserver, daemon):
    dropped = drop_demo_batches(Lake(cli_env.lake))
    config = {"ops": {"sales__products": {"config": {"batch": dropped.products_batch}}}}
    run_id = launch_from_ui(webserver, ["sales", "products"], config, {"custody/requested_by": "eve"})
    instance = instance_for(cli_env)
    deadline = time.monotonic() + 180
    while not instance.get_run_by_id(run_id).is_finished:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"the run did not finish in 180 s: {instance.get_run_by_id(run_id).status}"
        time.sleep(0.5)
    assert instance.get_run_by_id(run_id).is_failure
    failures = [e.dagster_event.step_failure_data for e in instance.all_logs(run_id) if e.dagster_event and e.dagster_event.is_step_failure]
    assert failures[0].user_failure_data.description == (
        "denied: eve may not ingest sales/products: it needs producer (sales-producers) or owner (sales-owners)")
    messages = " ".join(e.user_message for e in instance.all_logs(run_id))
    assert "starting Spark" not in messages and "SparkSession" not in messages
    assert run(["ledger", "show", "--action", "ingest", "--json"]) == 0
    [decision] = json.loads(capsys.readouterr().out)
    assert (decision["actor"], decision["run_id"], decision["details"]["result"]) == ("eve", run_id, "denied")
