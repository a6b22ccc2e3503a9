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
