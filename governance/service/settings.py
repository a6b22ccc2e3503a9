"""The API's policy settings routes: the settings pinned in the catalog, for any signed-in user, and
an admin's change of one, decided for the caller and recorded with channel `api`, allowed or denied.
The directory's settings, and those the service's environment sets, stay with its host."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from governance.access.settings import change_setting, held_by_the_host, pinned_view
from governance.service.api import Caller, answer, identity_of, recorded
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")


class Value(BaseModel):
    value: str = Field(max_length=4096, description="The new value, as its CUSTODY_* variable takes it.")


@router.get("/settings", tags=["settings"], response_class=JSONResponse)
def pinned(principal: Caller, request: Request) -> Response:
    """The policy settings pinned in the catalog, as `custody settings show --json`: each with who
    set it and when, and in `disagreements` those the service itself was given otherwise."""
    custody = service_of(request).custody
    return answer(pinned_view(custody.store, custody.settings, custody.environ))


@router.put("/settings/{key}", tags=["settings"], response_class=JSONResponse)
def change(principal: Caller, request: Request, key: str, wanted: Value) -> Response:
    """Pin a new value for a policy setting. Needs the admin group, and may not leave every admin
    out; the directory's settings, and those the service's environment sets, are changed on its host."""
    custody = service_of(request).custody
    done = change_setting(
        custody.store,
        custody.settings,
        custody.environ,
        identity_of(principal),
        key,
        wanted.value,
        details=recorded(principal),
        held=held_by_the_host(custody.settings),
    )
    return answer({**asdict(done), "changed": done.changed})
