"""The API's spec routes: what the spec files the service reads change against the definitions in
force, putting them in force for the caller (an owner of each), and each asset's history of specs."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from governance.approval import apply, edits, history
from governance.service.api import Caller, answer, identity_of, key_of
from governance.service.context import service_of
from governance.spec import SpecSet, load_specs
from governance.zones import AssetKey

router = APIRouter(prefix="/api/v1")


class Assets(BaseModel):
    assets: list[str] = Field(default_factory=list, max_length=10_000, description="DOMAIN/NAME each; none: all.")


@router.get("/specs/edits", tags=["specs"], response_class=JSONResponse)
def spec_edits(
    principal: Caller, request: Request, asset: Annotated[list[str] | None, Query(max_length=10_000)] = None
) -> Response:
    """What the spec files change against the definitions in force (of `asset`…, else all), as
    `custody specs diff --json`: each field, and what follows from it."""
    custody = service_of(request).custody
    keys = [AssetKey.parse(name) for name in asset or []]
    return answer([edit.as_dict() for edit in edits(custody.store, folder(request), custody.policy.directory, keys)])


@router.post("/specs/apply", tags=["specs"], response_class=JSONResponse)
def spec_apply(principal: Caller, request: Request, wanted: Assets) -> Response:
    """Put the edited specs in force, all or none, for the caller: an owner of each changed asset.
    The folder must be valid as a whole; each application is a `spec.applied` ledger entry."""
    custody = service_of(request).custody
    keys = [AssetKey.parse(name) for name in wanted.assets]
    applied = apply(custody.store, custody.policy, identity_of(principal), folder(request), keys)
    return answer([done.as_dict() for done in applied])


@router.get("/specs/{domain}/{name}/history", tags=["specs"], response_class=JSONResponse)
def spec_history(principal: Caller, request: Request, domain: str, name: str) -> Response:
    """Each spec of the asset put in force, oldest first: who applied it, when, and what it changed."""
    return answer([asdict(entry) for entry in history(service_of(request).custody.store, key_of(domain, name))])


def folder(request: Request) -> SpecSet:
    """The spec files as they are now, read whole: an edit shows at the next request."""
    settings = service_of(request).custody.settings
    return load_specs(settings.specs, settings.cache_dir, transform_packages=settings.transform_packages)
