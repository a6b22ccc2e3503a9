"""The service as each process of `custody serve --no-ui --workers N` builds it: from the environment
it inherited from the command, which read and checked the same settings before starting it."""

from __future__ import annotations

import os
import sys

from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE

from governance.api import Custody
from governance.config import Settings
from governance.envsecrets import scrub
from governance.errors import CustodyError
from governance.service import SECRETS
from governance.service.app import api_threads, create_app
from governance.service.gateway import Gateway
from governance.service.recent import Recent
from governance.service.refusals import window_from
from governance.service.sessions import SessionSettings

FACTORY = f"{__name__}:from_environment"


def from_environment() -> ASGIApp:
    """The API alone, for one worker process (uvicorn's application factory). A worker that cannot
    build it says why and exits as uvicorn's supervisor understands: it stops the others."""
    environ = os.environ
    try:
        custody = Custody(Settings.from_env(), channel="cli")
        sessions, gateway = SessionSettings.from_environ(environ), Gateway.from_environ(environ)
        recent = Recent.from_environ(environ)
        threads = api_threads(environ, ui=False)
        window = window_from(environ)
    except CustodyError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(STARTUP_FAILURE) from err
    scrub(SECRETS)
    return create_app(custody, sessions, gateway=gateway, recent=recent, threads=threads, refusals_window=window)
