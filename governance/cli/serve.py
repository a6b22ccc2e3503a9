"""`custody serve`: the service, with the Dagster UI behind its login."""

from __future__ import annotations

import os
import signal
import socket
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from governance.cli.common import app, load_settings, open_custody
from governance.config import Settings
from governance.envsecrets import scrub
from governance.errors import EnvironmentProblem, InvalidInput
from governance.service import SECRETS

if TYPE_CHECKING:
    from starlette.types import ASGIApp

WORKSPACE = Path(__file__).resolve().parents[2] / "workspace.yaml"


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port to listen on; 0 for any free one.")] = 3000,
    ui: Annotated[bool, typer.Option("--ui/--no-ui", help="Serve the Dagster UI behind the login.")] = True,
    daemon: Annotated[
        bool,
        typer.Option("--daemon/--no-daemon", help="Run Dagster's daemon beside it: the queue, sensors, schedules."),
    ] = True,
    workspace: Annotated[
        Path, typer.Option(help="The Dagster workspace whose code locations the UI shows.", exists=True)
    ] = WORKSPACE,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="Processes answering the API on the same port, with --no-ui; more than one needs "
            "CUSTODY_SESSION_SECRET, so that each knows the tokens the others issue.",
        ),
    ] = 1,
    dagster_url: Annotated[
        str | None,
        typer.Option(
            help="The address of a Dagster webserver served on its own (`dg dev`, `dagster-webserver`) on the "
            "same Dagster instance, to serve behind the login instead of one in this process; no daemon is started. "
            "It needs CUSTODY_UI_SIGNING_KEY here and the webserver CUSTODY_UI_VERIFY_KEY.",
        ),
    ] = None,
    new_ui_keys: Annotated[
        bool,
        typer.Option(
            "--new-ui-keys",
            help="Print a new pair of CUSTODY_UI_SIGNING_KEY and CUSTODY_UI_VERIFY_KEY for --dagster-url, and exit.",
        ),
    ] = False,
) -> None:
    """Serve Custody over HTTP: the login, and the Dagster UI behind it.

    Every page of the UI, its GraphQL and its WebSocket need a session, opened at /login with a
    directory password; a run launched from the UI is for the signed-in user, verified. Sessions are
    signed with CUSTODY_SESSION_SECRET (else a key of this process's own, so they end when it stops)
    and last CUSTODY_SESSION_SECONDS (8 hours by default). Behind an authenticating gateway, the user
    it names in CUSTODY_GATEWAY_USER_HEADER is trusted from it alone: from the addresses in
    CUSTODY_GATEWAY_PEERS, with the secret CUSTODY_GATEWAY_SECRET in X-Custody-Gateway-Secret, or both.
    The API keeps the answers every user gets alike (the catalog, lineage) CUSTODY_SERVICE_CACHE_SECONDS
    (2 by default). With --no-ui, each process answers on CUSTODY_SERVICE_THREADS threads (4 by
    default), and --workers N answers the API in N processes.

    With --dagster-url, the UI is a webserver's of its own, such as `dg dev --port 3001`: this service
    signs each signed-in request's user with CUSTODY_UI_SIGNING_KEY, and the webserver's run coordinator
    trusts it by the public CUSTODY_UI_VERIFY_KEY in the webserver's environment. Serve the webserver
    where only this service reaches it: reached directly, it refuses to launch runs or to switch
    sensors and schedules, but shows its pages and offers its other controls to anyone."""
    import uvicorn

    from governance.service.app import api_threads, create_app
    from governance.service.gateway import Gateway
    from governance.service.principal import UiKeys
    from governance.service.recent import Recent
    from governance.service.refusals import window_from
    from governance.service.sessions import SessionSettings
    from governance.service.upstream import Upstream

    if new_ui_keys:
        for name, value in UiKeys.new().environ().items():
            typer.echo(f"{name}={value}")
        return
    if dagster_url is not None and (workers > 1 or not ui):
        raise InvalidInput("--dagster-url serves a webserver's UI: give neither --no-ui nor --workers")
    settings = load_settings()
    ui_keys = UiKeys.from_environ(os.environ) if dagster_url is not None else None
    upstream = Upstream(dagster_url) if dagster_url is not None else None
    session_settings = SessionSettings.from_environ(os.environ)
    gateway = Gateway.from_environ(os.environ)
    caution = gateway.warning() if gateway is not None else None
    if caution is not None:
        typer.echo(caution, err=True)
    recent = Recent.from_environ(os.environ)
    threads = api_threads(os.environ, ui)
    if workers > 1:
        # The settings were read above to refuse a bad one here, once, before any worker starts;
        # each worker reads them again from the environment it inherits.
        _serve_api_in_processes(settings, host, port, workers, ui)
        return
    # Read, the service's own secrets leave the environment: the daemon, the code servers and the
    # run workers (which run owners' transforms) inherit it, and need neither.
    scrub(SECRETS)
    custody = open_custody(settings)
    with ExitStack() as stack:
        # A long-running service checkpoints the ledger when due, not at every request; its last
        # entries are checkpointed as it stops.
        stack.callback(custody.store.checkpoint)
        # Bound before the UI loads, so the port is this service's from the start (and `--port 0`
        # says which one it got); connections wait in the queue until it serves.
        listening = stack.enter_context(_listen(host, port))
        served: ASGIApp | None = None
        runs = None
        if upstream is not None:
            from governance.orchestration import orchestrator

            served, runs = upstream, orchestrator().runs(settings, upstream, ui_keys)
        elif ui:
            from governance.orchestration import orchestrator

            os.environ.setdefault("DAGSTER_HOME", str(settings.dagster_home))
            in_process = stack.enter_context(orchestrator().ui(settings, workspace, daemon=daemon))
            served, runs = in_process, orchestrator().runs(settings, in_process)
        bound = listening.getsockname()[1]
        fronted = f"; the UI of {upstream.url}" if upstream is not None else ""
        typer.echo(f"Custody serves on http://{host}:{bound} (sign in at /login{fronted})")
        # The peer is the TCP peer: an X-Forwarded-For a client sends must not stand for the address
        # a gateway is trusted from.
        app = create_app(
            custody, session_settings, served, gateway, runs, recent, threads, ui_keys, window_from(os.environ)
        )
        config = uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False)
        # uvicorn stops gracefully on SIGTERM, then raises it again once stopped: handled here as an
        # exit, it unwinds this block, which stops the daemon and the code servers with the service.
        signal.signal(signal.SIGTERM, _exit)
        uvicorn.Server(config).run(sockets=[listening])


def _serve_api_in_processes(settings: Settings, host: str, port: int, workers: int, ui: bool) -> None:
    """The API alone, answered by `workers` processes that share the listening socket; each builds
    the service from the environment this process keeps (with the secrets, for the workers it may
    start again) and takes the secrets out of its own. A worker that cannot start stops them all."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    from governance.service.sessions import SECRET_VARIABLE
    from governance.service.workers import FACTORY

    if ui:
        raise InvalidInput(
            f"--workers {workers} answers the API in several processes, and the UI is served by one: "
            "give --no-ui too, or serve the UI with --workers 1"
        )
    if not os.environ.get(SECRET_VARIABLE):
        raise InvalidInput(
            f"--workers {workers} needs {SECRET_VARIABLE}: without a key they share, a token one process "
            "issued would be refused by the others"
        )
    custody = open_custody(settings)
    with ExitStack() as stack:
        stack.callback(custody.store.checkpoint)
        listening = stack.enter_context(_listen(host, port))
        typer.echo(f"Custody serves on http://{host}:{listening.getsockname()[1]} (the API, in {workers} processes)")
        config = uvicorn.Config(
            FACTORY, factory=True, workers=workers, log_level="warning", access_log=False, proxy_headers=False
        )
        # uvicorn's supervisor of worker processes: it starts them on this socket, restarts one that
        # dies serving, and stops them all on SIGTERM or SIGINT, or when one could not start.
        supervisor = Multiprocess(config, sockets=[listening])
        supervisor.run()
        if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
            raise EnvironmentProblem("a worker of the service could not start: it said why above")


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((host, port))
    except OSError as err:
        listening.close()
        raise EnvironmentProblem(f"cannot listen on {host}:{port}: {err.strerror}") from err
    listening.listen(2048)
    return listening
