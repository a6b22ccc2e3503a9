"""Dagster's webserver as an ASGI app in the Custody service's process, behind its login, and
Dagster's daemon beside it. Dagster ships its webserver only as a command; building the app takes
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

from assets.dagster_internals import (
    WorkspaceFileTarget,
    WorkspaceProcessContext,
    create_app_from_workspace_process_context,
    webserver_version,
)
from assets.launch import instance_for
from governance.config import Settings

DAEMON = Path(sys.executable).with_name("dagster-daemon")
STOP_SECONDS = 30


@contextmanager
def dagster_ui(settings: Settings, workspace: Path) -> Iterator[ASGIApp]:
    """The UI of the code locations `workspace` names, on the home's Dagster instance. Its code
    servers run while the block does."""
    instance = instance_for(settings)
    target = WorkspaceFileTarget(paths=[str(workspace)])
    with WorkspaceProcessContext(instance, target, version=webserver_version) as context:
        yield create_app_from_workspace_process_context(context)


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
