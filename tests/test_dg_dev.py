"""`dg dev` behind Custody's login: Dagster's own development server (its webserver and daemon, served
on their own) with `custody serve --dagster-url` in front of it. Every page, GraphQL request and
WebSocket goes through the login; a run is for the signed-in user, verified, by the key pair the two
share; the webserver reached directly launches no run. A spec's freshness is Dagster's policy on the
asset, which Dagster's own daemon evaluates and its UI shows.

The tests share one `dg dev` and one service, on a home with the demo's batches dropped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import requests
from selenium.webdriver.remote.webdriver import WebDriver
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from assets.dagster_internals import freeze_time
from assets.launch import instance_for
from assets.origin import ASSET_JOB, LOCATION, REPOSITORY
from governance.catalog import Catalog
from governance.config import Settings
from governance.demo import drop_demo_batches
from governance.service.principal import SIGNING_VARIABLE, VERIFY_VARIABLE, UiKeys, signed_principal
from governance.service.sessions import Principal
from governance.zones import Lake
from tests.browser import chromium, launched_signed_in, ledger_of, materialized, signed_in
from tests.conftest import DEMO_SPECS, ROOT, plain_environ, quick_spark_environ, without_approval
from tests.dagster_servers import CUSTODY, Served, SignedIn, dg_dev, form_token, graphql, start_service, stop
from tests.helpers import recorded, run_proven
from tests.ports import refusing_port
from tests.wiretap import wiretap

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
CLIENTS = {
    "selector": {
        "repositoryLocationName": LOCATION,
        "repositoryName": REPOSITORY,
        "jobName": ASSET_JOB,
        "assetSelection": [{"path": ["sales", "clients"]}],
    }
}
PRODUCTS = {
    "selector": {
        "repositoryLocationName": LOCATION,
        "repositoryName": REPOSITORY,
        "jobName": ASSET_JOB,
        "assetSelection": [{"path": ["sales", "products"]}],
    }
}


def logout_token(user: SignedIn) -> str:
    return form_token(user.http.get(f"{user.base}/logout", timeout=30).text)


@dataclass(frozen=True)
class Fronted:
    """`dg dev` on a home, and the service in front of it."""

    settings: Settings
    served: Served
    dg: subprocess.Popen
    dg_port: int
    keys: UiKeys

    @property
    def cookie(self) -> str:
        signed = self.served.as_user("bob").http.cookies
        return "; ".join(f"{cookie.name}={cookie.value}" for cookie in signed)


@pytest.fixture(scope="module")
def fronted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fronted]:
    """The demo's specs, sales/clients given a freshness of one hour; Dagster's freshness daemon
    looks at every asset each second."""
    folder = tmp_path_factory.mktemp("dg-dev")
    home = folder / "home"
    specs = Path(shutil.copytree(DEMO_SPECS, folder / "specs"))
    clients = specs / "sales" / "clients.yaml"
    clients.write_text(clients.read_text() + "freshness:\n  max_lag: 1h\n")
    settings = without_approval(Settings.under(home, specs=specs))
    keys = UiKeys.new()
    env = {**plain_environ(home), **quick_spark_environ(), "CUSTODY_SPECS": str(specs)}
    drop_demo_batches(Lake(settings.lake))
    webserver_env = {**env, VERIFY_VARIABLE: keys.environ()[VERIFY_VARIABLE], "FRESHNESS_DAEMON_INTERVAL_SECONDS": "1"}
    with dg_dev(settings, webserver_env, folder / "dg-dev.log") as (process, port):
        service_env = {**env, SIGNING_VARIABLE: keys.environ()[SIGNING_VARIABLE]}
        server, served = start_service(settings, service_env, args=["--dagster-url", f"http://127.0.0.1:{port}"])
        try:
            yield Fronted(settings, Served(served), process, port, keys)
        finally:
            stop(server)


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[WebDriver]:
    yield from chromium(request)


def test_the_plain_materialize_in_dg_dev_s_ui_runs_for_the_user_signed_in_at_the_service(
    fronted, browser, monkeypatch, capsys
):
    for name, value in plain_environ(fronted.settings.home).items():
        monkeypatch.setenv(name, value)
    ui = signed_in(browser, fronted.served.port)
    done = materialized(ui, "sales/products", instance_for(fronted.settings), fronted.dg)
    assert done.tags["custody/requested_by"] == "bob"
    ui.open("/assets/sales/products")
    ui.shows("sales/products@1", "verified")
    launched_signed_in(ledger_of(done.run_id), "bob")


FRESHNESS = """{ assetNodeOrError(assetKey: {path: ["sales", "clients"]}) { ... on AssetNode {
  internalFreshnessPolicy { ... on TimeWindowFreshnessPolicy { failWindowSeconds } }
  freshnessStatusInfo { freshnessStatus } } } }"""


def freshness_turns(fronted: Fronted, status: str, seconds: float = 120) -> dict:
    """What the UI's GraphQL says of sales/clients' freshness once Dagster's daemon has made it `status`."""
    deadline = time.monotonic() + seconds
    while (node := graphql(fronted.served, FRESHNESS)["assetNodeOrError"])["freshnessStatusInfo"] != {
        "freshnessStatus": status
    }:
        assert fronted.dg.poll() is None, "dg dev exited"
        assert time.monotonic() < deadline, f"sales/clients' freshness is not {status} in {seconds:g} s: {node}"
        time.sleep(1)
    return node


def test_a_spec_s_freshness_fails_in_the_ui_past_its_lag_and_passes_once_a_new_version_lands(
    fronted, browser, monkeypatch
):
    instance = instance_for(fronted.settings)
    # Time made injectable: Dagster's frozen clock dates this materialization two hours back.
    with freeze_time(datetime.now(UTC) - timedelta(hours=2)):
        instance.report_runless_asset_event(dg.AssetMaterialization(["sales", "clients"]))

    node = freshness_turns(fronted, "DEGRADED")
    assert node["internalFreshnessPolicy"] == {"failWindowSeconds": 3600}
    ui = signed_in(browser, fronted.served.port)
    ui.shows_once_loaded(
        "/assets/sales/clients", "Freshness policy", "Failed", "Fails if more than an hour since last materialization"
    )

    for name, value in {**plain_environ(fronted.settings.home), "CUSTODY_SPECS": str(fronted.settings.specs)}.items():
        monkeypatch.setenv(name, value)
    assert run_proven(["ingest", "sales/clients", "--as", "bob"]) == 0
    freshness_turns(fronted, "HEALTHY")
    assert "Failed" not in ui.shows_once_loaded(
        "/assets/sales/clients", "sales/clients@1", "Freshness policy", "Passing"
    )


def test_without_a_session_dg_dev_s_graphql_and_websocket_are_refused_at_the_service(fronted):
    asked = requests.post(f"http://127.0.0.1:{fronted.served.port}/graphql", json={"query": "{ version }"}, timeout=30)
    assert (asked.status_code, asked.json()) == (401, {"detail": "sign in first"})
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{fronted.served.port}/graphql", subprotocols=["graphql-ws"], open_timeout=30)
    assert refused.value.response.status_code == 401


def test_a_signed_in_websocket_reaches_dg_dev_s_graphql_through_the_service(fronted):
    with connect(
        f"ws://127.0.0.1:{fronted.served.port}/graphql",
        subprotocols=["graphql-ws"],
        additional_headers={"Cookie": fronted.cookie, "Origin": f"http://127.0.0.1:{fronted.served.port}"},
        open_timeout=30,
    ) as socket:
        socket.send(json.dumps({"type": "connection_init", "payload": {}}))
        assert json.loads(socket.recv(timeout=30)) == {"type": "connection_ack"}
        assert socket.subprotocol == "graphql-ws"


@pytest.mark.parametrize(
    "header",
    [None, "bob", "signed-with-another-pair", "signed-in-this-process"],
)
def test_dg_dev_s_webserver_reached_directly_launches_no_run(fronted, header):
    bob = Principal("bob", "password", "session-key")
    body = json.dumps({"query": LAUNCH, "variables": {"params": PRODUCTS}}).encode()
    headers = {
        None: {},
        "bob": {"x-custody-principal": "bob"},
        "signed-with-another-pair": {
            "x-custody-principal": signed_principal(bob, UiKeys.new(), method="POST", body=body)
        },
        "signed-in-this-process": {"x-custody-principal": signed_principal(bob, method="POST", body=body)},
    }[header]
    answer = requests.post(
        f"http://127.0.0.1:{fronted.dg_port}/graphql",
        data=body,
        headers={**headers, "content-type": "application/json"},
        timeout=120,
    )
    launched = answer.json()["data"]["launchRun"]
    assert launched == {
        "__typename": "PythonError",
        "message": "Custody refused this run: the Dagster UI launches runs only for a signed-in user: open it "
        "through `custody serve` (`make ui`) and sign in",
    }


BACKFILL = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
CANCEL = """mutation($id: String!) { cancelPartitionBackfill(backfillId: $id) { __typename } }"""


def ledger_since(settings: Settings, since: str, action: str) -> list[dict]:
    """The ledger's entries of `action` since `since`, as `custody ledger show --json` gives them."""
    return recorded(Catalog.from_url(settings.catalog_url), since=since, action=action)


def test_a_backfill_typed_as_a_schedule_s_on_dg_dev_s_own_port_launches_nothing(fronted):
    since, instance = datetime.now(UTC).isoformat(), instance_for(fronted.settings)
    params = {
        "assetSelection": [{"path": ["sales", "clients"]}],
        "allPartitions": True,
        "tags": [
            {"key": "custody/requested_by", "value": "alice"},
            {"key": "dagster/schedule_name", "value": "nightly"},
        ],
    }
    asked = {"query": BACKFILL, "variables": {"params": params}}
    made = requests.post(f"http://127.0.0.1:{fronted.dg_port}/graphql", json=asked, timeout=120).json()
    backfill = made["data"]["launchPartitionBackfill"]["backfillId"]
    try:
        deadline = time.monotonic() + 120
        while not (refused := [e for e in ledger_since(fronted.settings, since, "session") if e["run_id"]]):
            assert fronted.dg.poll() is None, "dg dev exited"
            assert time.monotonic() < deadline, "dg dev's daemon submitted no run of the backfill in 120 s"
            time.sleep(2)
    finally:
        requests.post(
            f"http://127.0.0.1:{fronted.dg_port}/graphql",
            json={"query": CANCEL, "variables": {"id": backfill}},
            timeout=60,
        )
    [entry, *_] = refused
    assert (entry["actor"], entry["assurance"], entry["details"]["result"]) == ("anonymous", "none", "denied")
    assert entry["details"]["claimed"] == "alice"
    assert entry["details"]["reason"].startswith(f"no signed-in user launched backfill {backfill}")
    assert instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill})) == []
    assert ledger_since(fronted.settings, since, "ingestion") == []


def test_a_launch_seen_between_the_service_and_dg_dev_and_sent_again_launches_nothing(fronted):
    since, instance = datetime.now(UTC).isoformat(), instance_for(fronted.settings)
    with wiretap(f"http://127.0.0.1:{fronted.dg_port}") as tap:
        env = {
            **plain_environ(fronted.settings.home),
            **quick_spark_environ(),
            "CUSTODY_SPECS": str(fronted.settings.specs),
        }
        env[SIGNING_VARIABLE] = fronted.keys.environ()[SIGNING_VARIABLE]
        server, port = start_service(fronted.settings, env, args=["--dagster-url", f"http://127.0.0.1:{tap.port}"])
        try:
            bob = Served(port).as_user("bob")
            launched = bob.graphql(LAUNCH, {"params": CLIENTS})["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            logout = bob.http.post(
                f"{bob.base}/logout", data={"csrf": logout_token(bob)}, allow_redirects=False, timeout=30
            )
            assert logout.status_code == 303
        finally:
            stop(server)
    [seen] = [s for s in tap.seen if s.method == "POST" and b"launchRun" in s.body]
    assert "x-custody-principal" in {name.lower() for name in seen.headers}
    runs = {run.run_id for run in instance.get_runs()}
    for body in (seen.body, seen.body + b" "):
        again = requests.post(
            f"http://127.0.0.1:{fronted.dg_port}/graphql", data=body, headers=seen.headers, timeout=120
        )
        assert again.json()["data"]["launchRun"]["__typename"] == "PythonError"
    assert {run.run_id for run in instance.get_runs()} == runs | {launched["run"]["runId"]}
    # The runs' refusals, each under its run's id: the gate's summaries of requests made without
    # signing in (another test's, written when due) have none.
    refused = [
        e
        for e in ledger_since(fronted.settings, since, "session")
        if e["action"] == "session" and e["details"]["result"] == "denied" and e["run_id"]
    ]
    reasons = [e["details"]["reason"] for e in refused]
    assert reasons[0] == "a request signed for bob was sent again: a signed request launches once"
    assert reasons[1].startswith("the Dagster UI launches runs only for a signed-in user")


NIGHTLY = {
    "repositoryLocationName": LOCATION,
    "repositoryName": REPOSITORY,
    "scheduleName": "custody_ledger_maintenance_nightly",
}
DROPZONE = {**{k: v for k, v in NIGHTLY.items() if k != "scheduleName"}, "sensorName": "custody_dropzone"}
SCHEDULE_STATE = """query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) {
  ... on Schedule { scheduleState { id status } } } }"""
START_SCHEDULE = """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
  __typename ... on PythonError { message } } }"""
STOP_SCHEDULE = """mutation($id: String) { stopRunningSchedule(id: $id) {
  __typename ... on PythonError { message } } }"""
START_SENSOR = """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
  __typename ... on PythonError { message } } }"""
SENSOR_STATUS = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
  ... on Sensor { sensorState { status } } } }"""


def test_sensors_and_schedules_change_on_dg_dev_s_own_port_only_as_custody_decided(fronted):
    since, own = datetime.now(UTC).isoformat(), f"http://127.0.0.1:{fronted.dg_port}/graphql"
    alice = fronted.served.as_user("alice")

    def directly(query: str, variables: dict) -> dict:
        return requests.post(own, json={"query": query, "variables": variables}, timeout=120).json()["data"]

    def schedule() -> dict:
        return directly(SCHEDULE_STATE, {"s": NIGHTLY})["scheduleOrError"]["scheduleState"]

    running = schedule()
    assert running["status"] == "RUNNING"
    stop = {"id": running["id"]}
    answers = [directly(STOP_SCHEDULE, stop)["stopRunningSchedule"]]
    assert schedule()["status"] == "RUNNING"
    assert alice.graphql(STOP_SCHEDULE, stop)["stopRunningSchedule"]["__typename"] == "ScheduleStateResult"
    assert schedule()["status"] == "STOPPED"
    answers.append(directly(START_SCHEDULE, {"s": NIGHTLY})["startSchedule"])
    assert schedule()["status"] == "STOPPED"
    assert alice.graphql(START_SCHEDULE, {"s": NIGHTLY})["startSchedule"]["__typename"] == "ScheduleStateResult"
    # alice's stop was decided a moment ago, and taken: it stops nothing again
    answers.append(directly(STOP_SCHEDULE, stop)["stopRunningSchedule"])
    answers.append(directly(START_SENSOR, {"s": DROPZONE})["startSensor"])
    assert schedule()["status"] == "RUNNING"
    assert directly(SENSOR_STATUS, {"s": DROPZONE})["sensorOrError"]["sensorState"]["status"] == "STOPPED"

    assert [answer["__typename"] for answer in answers] == ["PythonError"] * 4
    assert answers[-1]["message"] == (
        "Custody refused this: startSensor of custody_dropzone was asked of Dagster without Custody's "
        "decision: sensors and schedules are started, stopped or reset by an admin, through Custody's UI"
    )
    decided = [
        (e["actor"], e["details"]["result"], e["details"]["channel"], e["details"]["mutation"])
        for e in ledger_since(fronted.settings, since, "control")
    ]
    assert decided == [  # the second refused stop is counted with the first, recorded as its window ends
        ("anonymous", "denied", "dagster", "stopRunningSchedule"),
        ("alice", "allowed", "ui", "stopRunningSchedule"),
        ("anonymous", "denied", "dagster", "startSchedule"),
        ("alice", "allowed", "ui", "startSchedule"),
        ("anonymous", "denied", "dagster", "startSensor"),
    ]


def test_the_service_says_which_webserver_did_not_answer(tmp_path):
    home = tmp_path / "home"
    settings = without_approval(Settings.under(home, specs=DEMO_SPECS))
    env = {**plain_environ(home), SIGNING_VARIABLE: UiKeys.new().environ()[SIGNING_VARIABLE]}
    with refusing_port() as refusing:
        nowhere = f"http://127.0.0.1:{refusing}"
        server, port = start_service(settings, env, args=["--dagster-url", nowhere])
        try:
            answer = Served(port).as_user("bob").post("/graphql", {"query": "{ version }"})
        finally:
            stop(server)
    assert answer.status_code == 502
    assert answer.json()["detail"].startswith(f"Dagster's webserver at {nowhere} did not answer: ")


def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`custody serve ARGS` on a home of its own, with `env`, for what it says before it serves."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
    return subprocess.run(
        [str(CUSTODY), "serve", *args],
        cwd=ROOT,
        env={**kept, **plain_environ(tmp_path / "home"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_serve_refuses_a_dagster_url_without_its_signing_key_naming_the_variable(tmp_path):
    said = serve(tmp_path, "--dagster-url", "http://127.0.0.1:3001")
    assert said.returncode != 0
    assert f"--dagster-url needs {SIGNING_VARIABLE}" in said.stderr


def test_serve_refuses_a_dagster_url_that_is_no_web_address(tmp_path):
    env = {SIGNING_VARIABLE: UiKeys.new().environ()[SIGNING_VARIABLE]}
    said = serve(tmp_path, "--dagster-url", "127.0.0.1:3001", env=env)
    assert said.returncode != 0
    assert "--dagster-url: '127.0.0.1:3001' is no http:// or https:// address of a Dagster webserver" in said.stderr


def test_new_ui_keys_prints_a_pair_the_service_and_the_webserver_take(tmp_path):
    said = serve(tmp_path, "--new-ui-keys")
    assert said.returncode == 0, said.stderr
    pair = dict(line.split("=", 1) for line in said.stdout.splitlines())
    assert set(pair) == {SIGNING_VARIABLE, VERIFY_VARIABLE}
    assert UiKeys.from_environ(pair).environ() == pair
