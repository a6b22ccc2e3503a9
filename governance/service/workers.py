"""The service as each process of `custody serve --no-ui --workers N` builds it: from the environment
it inherited from the command, which read and checked the same settings before starting it."""

from __future__ import annotations

import os

from starlette.types import ASGIApp

from governance.api import Custody
from governance.config import Settings
from governance.service.app import create_app
from governance.service.gateway import Gateway
from governance.service.recent import Recent
from governance.service.sessions import SessionSettings

FACTORY = f"{__name__}:from_environment"


def from_environment() -> ASGIApp:
    """The API alone, for one worker process (uvicorn's application factory)."""
    environ = os.environ
    return create_app(
        Custody(Settings.from_env(), channel="cli"),
        SessionSettings.from_environ(environ),
        gateway=Gateway.from_environ(environ),
        recent=Recent.from_environ(environ),
    )
