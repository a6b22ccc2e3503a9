#!/usr/bin/env python
"""A materialization launched from the UI through Custody's login, against the same launched without
it: what the login costs a person pressing Materialize.

One home with the demo's products and clients ingested; Dagster's webserver app built once in this
process (as `custody serve` builds it) and served by uvicorn twice on loopback:

  with the login     the service's app (`custody serve`): a session cookie, checked against the
                     catalog on every request, cross-site checks, the principal signed for the run
                     coordinator
  without it         the same Dagster app behind nothing but bob's principal signed for each
                     request, in a session of his: the coordinator's decisions and the run are the same

Dagster's daemon takes the runs off the queue. Each round launches sales/names_and_products through
each, alternately, with the GraphQL launchRun mutation the Materialize button sends, and waits for
the run to succeed. Prints the launch request's time and the time to success, p50 and max of each,
and the difference of the medians; goal: no difference beyond noise.

    .venv/bin/python -m benchmarks.ui_login
    .venv/bin/python -m benchmarks.ui_login --rounds 2      # smoke run
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assets.launch import instance_for
from assets.ui import dagster_daemon, dagster_ui
from governance.api import Custody
from governance.cli import run
from governance.config import Settings
from governance.demo import demo_password, drop_demo_batches
from governance.service.app import create_app
from governance.service.context import replaying, whole_body
from governance.service.principal import PRINCIPAL_HEADER, signed_principal
from governance.service.sessions import Principal, Sessions, SessionSettings, new_session_id
from governance.zones import Lake

LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
PARAMS = {
    "selector": {
        "repositoryLocationName": "custody",
        "repositoryName": "__repository__",
        "jobName": "__ASSET_JOB",
        "assetSelection": [{"path": ["sales", "names_and_products"]}],
    },
    "runConfigData": {},
    "executionMetadata": {"tags": []},
}


class SignedForBob:
    """The Dagster app with bob's principal signed for every request, as the gate signs it: the run
    coordinator's input, without a login in front."""

    def __init__(self, app, principal: Principal):
        self.app = app
        self.principal = principal

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = await whole_body(receive) or b""
        header = signed_principal(self.principal, method=scope["method"], body=body)
        scope = {**scope, "headers": [*scope["headers"], (PRINCIPAL_HEADER.encode(), header.encode())]}
        await self.app(scope, replaying(body, receive), send)


def serve(app) -> tuple[uvicorn.Server, str]:
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", proxy_headers=False))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server, f"http://127.0.0.1:{listening.getsockname()[1]}"


def signed_in(base: str) -> requests.Session:
    http = requests.Session()
    form = http.get(f"{base}/login", timeout=30).text
    token = form.split('name="csrf" value="')[1].split('"')[0]
    answer = http.post(
        f"{base}/login",
        data={"user": "bob", "password": demo_password("bob"), "csrf": token},
        allow_redirects=False,
        timeout=60,
    )
    answer.raise_for_status()
    return http


def materialize(http: requests.Session, base: str, instance) -> tuple[float, float]:
    """Seconds for the launch request, and from the launch to the run's success."""
    started = time.perf_counter()
    answer = http.post(f"{base}/graphql", json={"query": LAUNCH, "variables": {"params": PARAMS}}, timeout=120)
    launched = answer.json()["data"]["launchRun"]
    if launched["__typename"] != "LaunchRunSuccess":
        raise SystemExit(f"the launch failed: {launched}")
    launch_seconds = time.perf_counter() - started
    run_id = launched["run"]["runId"]
    while not (found := instance.get_run_by_id(run_id)).is_finished:
        time.sleep(0.05)
    if not found.is_success:
        raise SystemExit(f"run {run_id} did not succeed: {found.status}")
    return launch_seconds, time.perf_counter() - started


def report(name: str, launches: list[float], totals: list[float]) -> None:
    print(
        f"  {name:<14} launch p50 {statistics.median(launches) * 1000:6.0f} ms (max {max(launches) * 1000:5.0f})   "
        f"to success p50 {statistics.median(totals):5.2f} s (max {max(totals):5.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="materializations through each, alternately")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="custody-ui-login-bench-") as folder:
        home = Path(folder) / "home"
        for variable in [name for name in os.environ if name.startswith(("CUSTODY_", "DAGSTER_"))]:
            del os.environ[variable]
        os.environ.update(
            CUSTODY_HOME=str(home),
            DAGSTER_HOME=str(home / "dagster"),
            CUSTODY_DROPZONE_SENSOR="off",
            CUSTODY_SPECS_APPROVAL="off",  # the demo specs taken as they are, as the tests do
            CUSTODY_PASSWORD=demo_password("bob"),  # bob, a producer, ingests the inputs
        )
        settings = Settings.from_env()
        drop_demo_batches(Lake(settings.lake))
        for asset in ("sales/products", "sales/clients"):
            if run(["ingest", asset, "--as", "bob"]) != 0:
                raise SystemExit(f"the ingestion of {asset} failed")
        instance = instance_for(settings)
        custody = Custody(settings)
        with dagster_daemon(settings, ROOT / "workspace.yaml"), dagster_ui(settings, ROOT / "workspace.yaml") as ui:
            login, with_login = serve(create_app(custody, SessionSettings.from_environ({}), ui))
            bob, _ = Sessions(custody.store, SessionSettings.from_environ({})).open(new_session_id(), "bob", "password")
            bare, without_login = serve(SignedForBob(ui, bob))
            browser, plain = signed_in(with_login), requests.Session()
            materialize(browser, with_login, instance)  # warm-up: code server, Spark, caches
            materialize(plain, without_login, instance)
            results: dict[str, tuple[list[float], list[float]]] = {"with login": ([], []), "without it": ([], [])}
            for _ in range(args.rounds):
                for name, http, base in (("with login", browser, with_login), ("without it", plain, without_login)):
                    launch, total = materialize(http, base, instance)
                    results[name][0].append(launch)
                    results[name][1].append(total)
            print(f"sales/names_and_products materialized {args.rounds} times through each, alternately")
            for name, (launches, totals) in results.items():
                report(name, launches, totals)
            difference = statistics.median(results["with login"][1]) - statistics.median(results["without it"][1])
            spread = statistics.pstdev(results["without it"][1])
            print(
                f"  difference of the medians to success: {difference * 1000:+.0f} ms (run-to-run spread {spread * 1000:.0f} ms)"
            )
            for server in (login, bare):
                server.should_exit = True


if __name__ == "__main__":
    main()
