"""The Custody service with Dagster's UI behind its login, and Dagster's daemon, on a test's instance, as
`make ui` starts them; a signed-in user's requests, GraphQL among them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import dagster as dg
import pytest
import requests

from assets.launch import instance_for
from governance.config import Settings
from governance.demo import demo_password
from tests.conftest import (
    DEMO_SPECS,
    ROOT,
    events_follow_the_spec,
    plain_environ,
    quick_spark_environ,
    without_approval,
)
from tests.ports import free_port

CUSTODY = Path(sys.executable).with_name("custody")
DAEMON = Path(sys.executable).with_name("dagster-daemon")


def serving(
    port: int, process: subprocess.Popen, seconds: float, said: Callable[[], str], path: str = "/login"
) -> None:
    """Wait until the server answers `path` on `port`; `said` tells what `process` printed if it
    exits. The service listens once the UI's code location has loaded."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2)
            return
        except OSError:
            assert process.poll() is None, f"the server exited: {said()[-2000:]}"
            assert time.monotonic() < deadline, f"the server did not start in {seconds:g} s: {said()[-2000:]}"
            time.sleep(0.1)


class SignedIn:
    """A user of the service, signed in at its login as a script is: its session cookie, sent back."""

    def __init__(self, port: int, user: str | None = None, password: str | None = None):
        self.base = f"http://127.0.0.1:{port}"
        self.http = requests.Session()
        if user is not None:
            answer = self.sign_in(user, demo_password(user) if password is None else password)
            assert answer.status_code == 303, answer.text

    def sign_in(self, user: str, password: str) -> requests.Response:
        form = self.http.get(f"{self.base}/login", timeout=30)
        data = {"user": user, "password": password, "csrf": form_token(form.text)}
        return self.http.post(f"{self.base}/login", data=data, allow_redirects=False, timeout=60)

    def post(self, path: str, body: object, headers: Mapping[str, str] | None = None) -> requests.Response:
        return self.http.post(f"{self.base}{path}", json=body, headers=headers, allow_redirects=False, timeout=120)

    def graphql(self, query: str, variables: Mapping[str, object] | None = None) -> dict:
        """What the UI's GraphQL answers: its data. Dagster answers an error with HTTP 500 and data."""
        answer = self.post("/graphql", {"query": query, "variables": dict(variables or {})})
        assert answer.status_code in (200, 500), f"{answer.status_code}: {answer.text}"
        return answer.json()["data"]


class Guesser:
    """Someone who guesses a password (`guess(n)`, the nth guess) from a client that never signed in
    as its user, again and again until stopped: as soon as one answer comes, the next guess goes.
    The block it guards begins once the guesses are slowed down."""

    def __init__(self, guess: Callable[[int], requests.Response]):
        self.guess = guess
        self.tries = 0
        self.answers: list[requests.Response] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.answers.append(self.guess(self.tries))
            self.tries += 1

    def __enter__(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not any("too many failed logins in a row" in answer.text for answer in list(self.answers)):
            assert time.monotonic() < deadline, f"the guesses were not slowed: {self.tries} tries"
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def form_token(page: str) -> str:
    """The token a form of the service's page carries against cross-site request forgery."""
    token = CSRF.search(page)
    assert token, page
    return token.group(1)


@dataclass(frozen=True)
class Served:
    """`custody serve` on a test's home: the login, and the Dagster UI behind it."""

    port: int

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1"

    def as_user(self, user: str | None = None, password: str | None = None) -> SignedIn:
        return SignedIn(self.port, user, password)


def graphql(served: Served, query: str) -> dict:
    """The UI's answer to `query`, asked by carol (a consumer): reading needs only a session."""
    return served.as_user("carol").graphql(query)


SERVES = re.compile(r"Custody serves on http://[^:]+:(\d+) ")


def start_service(
    settings: Settings,
    env: Mapping[str, str] | None = None,
    *,
    ui: bool = True,
    args: Sequence[str] = (),
    said: list[str] | None = None,
) -> tuple[subprocess.Popen, int]:
    """`custody serve` on the home of `settings`, with the process's environment and `env`, on a port
    it binds itself: one chosen here could be taken by another test's server before it binds. `said`
    gets the lines it printed before it served."""
    instance_for(settings)
    server = subprocess.Popen(
        [str(CUSTODY), "serve", "--port", "0", "--no-daemon", *(() if ui else ("--no-ui",)), *args],
        cwd=ROOT,
        env={**os.environ, "DAGSTER_HOME": str(settings.dagster_home), **(env or {})},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    lines = [] if said is None else said
    while (line := server.stdout.readline()) and not (found := SERVES.search(line)):
        lines.append(line)
    assert line, f"the service exited: {''.join(lines)[-2000:]}"
    port = int(found.group(1))
    serving(port, server, 120, lambda: "".join(lines))
    # Read on, so that what it says later never fills the pipe and stops it.
    threading.Thread(target=server.stdout.read, daemon=True).start()
    return server, port


@pytest.fixture
def webserver(cli_env) -> Iterator[Served]:
    """The Dagster UI as `make ui` serves it: behind Custody's login, in `custody serve`."""
    server, port = start_service(cli_env)
    yield Served(port)
    stop(server)


def start_daemon(settings: Settings, sensor: str = "on", env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Dagster's daemon on the home of `settings`, with the process's environment and `env`."""
    env = {
        **os.environ,
        **(env or {}),
        "DAGSTER_HOME": str(settings.dagster_home),
        "CUSTODY_DROPZONE_SENSOR": sensor,
        # As often as the daemon looks at its sensors: a test waits for the next tick, not half a minute.
        "CUSTODY_DROPZONE_SENSOR_SECONDS": "5",
    }
    return subprocess.Popen(
        [str(DAEMON), "run", "-w", "workspace.yaml"],
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


@dataclass(frozen=True)
class Shared:
    """`custody serve` on a home that a module's tests share, and Dagster's daemon beside it (the
    DropZone sensor off) when they run what they launch. Every test reads only what it made: its own
    assets and runs, or the ledger's entries since it began."""

    settings: Settings
    served: Served
    daemon: subprocess.Popen | None

    def for_cli(self, monkeypatch: pytest.MonkeyPatch) -> Settings:
        """The test's own commands pointed at the shared home, as cli_env points them at a test's home."""
        for name, value in plain_environ(self.settings.home).items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("CUSTODY_LAKE", raising=False)
        return self.settings


@contextmanager
def shared_service(home: Path, *, daemon: bool = False) -> Iterator[Shared]:
    # The autouse fixtures set a test's environment after a module's servers start: theirs is given here.
    env = {**plain_environ(home), **quick_spark_environ()}
    settings = without_approval(Settings.under(home, specs=DEMO_SPECS))
    server, port = start_service(settings, env)
    process = start_daemon(settings, "off", env) if daemon else None
    try:
        yield Shared(settings, Served(port), process)
    finally:
        if process is not None:
            stop(process)
        stop(server)
    events_follow_the_spec(home)


def finished(instance, run_id: str, daemon: subprocess.Popen, seconds: float = 180) -> dg.DagsterRun:
    deadline = time.monotonic() + seconds
    while not (run := instance.get_run_by_id(run_id)).is_finished:
        assert daemon.poll() is None, "the Dagster daemon exited"
        assert time.monotonic() < deadline, f"the run did not finish in {seconds:g} s: {run.status}"
        time.sleep(0.5)
    return run


def token(api: str, user: str) -> dict[str, str]:
    answer = requests.post(f"{api}/tokens", json={"user": user, "password": demo_password(user)}, timeout=60)
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['token']}"}


def client(
    api: str, tmp_path: Path, *args: str, stdin: str | None = None, command: Sequence[str] = (str(CUSTODY),)
) -> subprocess.CompletedProcess[str]:
    """`custody ARGS` in a process that knows the service's address and nothing of the catalog, the
    lake or the directory: its home is an empty folder, and no CUSTODY_* variable but CUSTODY_URL.
    `command`: what runs instead of the `custody` script, given the same ARGS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    env.update(
        CUSTODY_URL=api.removesuffix("/api/v1"),
        CUSTODY_HOME=str(tmp_path / "empty-home"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
    )
    return subprocess.run(
        [*command, *args],
        check=False,
        env=env,
        cwd=tmp_path,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


DG = Path(sys.executable).with_name("dg")


@contextmanager
def dg_dev(
    settings: Settings, env: Mapping[str, str], log: Path, project: Path = ROOT
) -> Iterator[tuple[subprocess.Popen, int]]:
    """`dg dev` in the project (or a copy of it, whose modules it then imports), on the home of
    `settings` and its Dagster instance, with `env` and the DropZone sensor off: Dagster's webserver
    and daemon, served on their own. What it says goes to `log`."""
    instance_for(settings)
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    environ.update(env, DAGSTER_HOME=str(settings.dagster_home), CUSTODY_DROPZONE_SENSOR="off")
    if project != ROOT:
        environ["PYTHONPATH"] = str(project)
    with log.open("w") as said:
        process = subprocess.Popen(
            [str(DG), "dev", "--port", str(port), "--host", "127.0.0.1"],
            cwd=project,
            env=environ,
            start_new_session=True,
            stdout=said,
            stderr=subprocess.STDOUT,
        )
    try:
        serving(port, process, 180, log.read_text, "/server_info")
        yield process, port
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen) -> None:
    """Stop a process and every process it started, as Ctrl-C does; kill what is left after a while."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
