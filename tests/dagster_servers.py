"""Dagster's own webserver and daemon on a test's instance, as `make ui` starts them, and its GraphQL API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest

from assets.launch import instance_for
from tests.conftest import ROOT

WEBSERVER = Path(sys.executable).with_name("dagster-webserver")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["data"]


def serving(port: int, process: subprocess.Popen, seconds: float, said: Callable[[], str]) -> None:
    """Wait until Dagster's webserver answers on `port`; `said` tells what `process` printed if it exits."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return
        except OSError:
            assert process.poll() is None, f"the webserver exited: {said()[-2000:]}"
            assert time.monotonic() < deadline, f"the webserver did not start in {seconds:g} s"
            time.sleep(0.1)


@pytest.fixture
def webserver(cli_env):
    instance_for(cli_env)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(cli_env.dagster_home)}
    server = subprocess.Popen(
        [str(WEBSERVER), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    serving(port, server, 120, lambda: server.stderr.read())
    yield port
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


def start_daemon(cli_env, sensor: str = "on") -> subprocess.Popen:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(cli_env.dagster_home),
        "CUSTODY_DROPZONE_SENSOR": sensor,
        # As often as the daemon looks at its sensors: a test waits for the next tick, not half a minute.
        "CUSTODY_DROPZONE_SENSOR_SECONDS": "5",
    }
    return subprocess.Popen(
        [str(WEBSERVER.with_name("dagster-daemon")), "run", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.fixture
def daemon(cli_env):
    """Dagster's daemon, as `make ui` (dagster dev) starts it: it takes runs off the UI's queue and runs
    the DropZone sensor."""
    process = start_daemon(cli_env)
    yield process
    stop(process)


@pytest.fixture
def queue_only(cli_env):
    """The daemon with the DropZone sensor stopped: only the runs a test launches run."""
    process = start_daemon(cli_env, sensor="off")
    yield process
    stop(process)


def finished(instance, run_id: str, daemon: subprocess.Popen, seconds: float = 180) -> dg.DagsterRun:
    deadline = time.monotonic() + seconds
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"the run did not finish in {seconds:g} s: {run.status}"
        time.sleep(0.5)
    return run
