"""Dagster's webserver as an ASGI app in the Custody service's process, behind its login, and
Dagster's daemon beside it. Its requests know their signed-in user, which a backfill they launch
keeps for its runs. Dagster ships its webserver only as a command; building the app takes
the workspace context its internals define, as that command does. This module alone does it, and
tests/test_ui_adapter.py holds the contract it relies on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starlette.types import ASGIApp

from assets.coordinator import CustodyRunCoordinator
from assets.dagster_internals import (
    WorkspaceFileTarget,
    WorkspaceProcessContext,
    WorkspaceRequestContext,
    create_app_from_workspace_process_context,
    webserver_version,
)
from assets.launch import instance_for
from governance.config import Settings
from governance.service.principal import PRINCIPAL_HEADER, principal_from

DAEMON = Path(sys.executable).with_name("dagster-daemon")
STOP_SECONDS = 30


@contextmanager
def dagster_ui(settings: Settings, workspace: Path) -> Iterator[ASGIApp]:
    """The UI of the code locations `workspace` names, on the home's Dagster instance. Its code
    servers run while the block does."""
    instance = instance_for(settings)
    target = WorkspaceFileTarget(paths=[str(workspace)])
    with SignedInWorkspace(instance, target, version=webserver_version) as context:
        yield create_app_from_workspace_process_context(context)


class SignedInWorkspace(WorkspaceProcessContext):
    """The webserver's workspace, whose requests know who the gate signed them for."""

    def create_request_context(self, source: object | None = None) -> WorkspaceRequestContext:
        return SignedInRequest(
            instance=self.instance,
            current_workspace=self.get_current_workspace(),
            process_context=self,
            version=self.version,
            source=source,
            read_only=self.read_only,
        )


class SignedInRequest(WorkspaceRequestContext):
    """A request of the UI. Dagster gives a backfill its viewer's tags over the tags typed for it
    (and nothing else asks for them): the backfill's runs, which the daemon submits later, carry who
    launched it."""

    def get_viewer_tags(self) -> dict[str, str]:
        coordinator = self.instance.run_coordinator
        if not isinstance(coordinator, CustodyRunCoordinator):
            return {}
        headers = getattr(self.source, "headers", None)
        return coordinator.backfill_tags(principal_from(headers.get(PRINCIPAL_HEADER) if headers else None))


@contextmanager
def dagster_daemon(settings: Settings, workspace: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Dagster's daemon on the home's instance: it takes runs off the queue, and runs sensors and
    schedules. Stopped, with its children, when the block ends."""
    instance_for(settings)  # its settings written before the daemon reads them
    process = subprocess.Popen(
        [str(DAEMON), "run", "-w", str(workspace)],
        env={**os.environ, "DAGSTER_HOME": str(settings.dagster_home)},
        start_new_session=True,
    )
    try:
        yield process
    finally:
        _stop(process.pid)
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            _stop(process.pid, signal.SIGKILL)
            process.wait()


def _stop(group: int, how: signal.Signals = signal.SIGTERM) -> None:
    """Stop the daemon's process group: the daemons it started too, even when it has exited."""
    try:
        os.killpg(group, how)
    except ProcessLookupError:
        pass
