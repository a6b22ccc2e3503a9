"""The API's access routes and the owners' and admins' changes: who holds each role on an asset, what
a user may do and why, grants and revokes, a version's status, and purges. Each change is decided for the caller, who
proved who they are to get the token, and recorded with channel `api`, allowed or denied."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from governance.access.grants import change_role, explained, parse_role, show
from governance.access.policy import Identity, Verb
from governance.catalog.states import Criticality
from governance.errors import NotFound
from governance.retention.purge import change_status, governed_purge
from governance.service.api import Caller, Version, answer, identity_of, key_of, recorded
from governance.service.context import Service, service_of
from governance.spec import Spec
from governance.zones import AssetKey, VersionRef

router = APIRouter(prefix="/api/v1")


class Member(BaseModel):
    user: str = Field(max_length=256, description="The directory user who gets the role.")


class Status(BaseModel):
    status: Literal["critical", "normal"]


def spec_of(service: Service, key: AssetKey) -> Spec:
    spec = service.specs().get(key)
    if spec is None:
        raise NotFound(f"unknown asset {key}: no spec declares it")
    return spec


@router.get("/access/{domain}/{name}", tags=["access"], response_class=JSONResponse)
def access(principal: Caller, request: Request, domain: str, name: str) -> Response:
    """Each role on the asset: its group, the group's members and what the role may do; the admin
    and auditor groups, and whether the asset needs a verified identity."""
    service = service_of(request)
    return answer(asdict(show(service.custody.policy, spec_of(service, key_of(domain, name)))))


@router.get("/access/{domain}/{name}/explain", tags=["access"], response_class=JSONResponse)
def explain(
    principal: Caller,
    request: Request,
    domain: str,
    name: str,
    user: Annotated[str | None, Query(max_length=256)] = None,
) -> Response:
    """What a user (the caller, unless `user` names another) may do to the asset, and why. Nothing
    is recorded; another user's rights are explained as a name given without proof has them."""
    service = service_of(request)
    spec = spec_of(service, key_of(domain, name))
    identity = identity_of(principal) if user in (None, principal.user) else Identity.asserted(user)
    return answer(explained(service.custody.policy, spec, identity))


@router.put("/access/{domain}/{name}/{role}", tags=["access"], response_class=JSONResponse)
def grant(principal: Caller, request: Request, domain: str, name: str, role: str, member: Member) -> Response:
    """Give a user the role: add them to its group in the directory. Needs the owner role."""
    return _change(principal, request, Verb.GRANT, key_of(domain, name), role, member.user)


@router.delete("/access/{domain}/{name}/{role}/{user}", tags=["access"], response_class=JSONResponse)
def revoke(principal: Caller, request: Request, domain: str, name: str, role: str, user: str) -> Response:
    """Take the role away: remove the user from its group in the directory. Needs the owner role."""
    return _change(principal, request, Verb.REVOKE, key_of(domain, name), role, user)


def _change(principal: Caller, request: Request, verb: Verb, key: AssetKey, role: str, user: str) -> Response:
    service = service_of(request)
    custody = service.custody
    spec = spec_of(service, key)
    change = change_role(
        custody.store, custody.policy, identity_of(principal), verb, parse_role(role), spec, user, service.specs()
    )
    return answer(asdict(change))


@router.put("/versions/{domain}/{name}/{number}/status", tags=["access"], response_class=JSONResponse)
def status(principal: Caller, request: Request, ref: Version, wanted: Status) -> Response:
    """Mark a version critical (protected from purge, with everything upstream) or normal. Needs the owner role."""
    service = service_of(request)
    custody = service.custody
    value = Criticality.parse(wanted.status)
    spec = service.specs().get(ref.key)
    return answer(
        asdict(
            change_status(custody.store, custody.policy, identity_of(principal), spec, ref, value, recorded(principal))
        )
    )


class Purge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    versions: list[str] = Field(
        default_factory=list, max_length=10_000, description="DOMAIN/NAME@N each; none: what retention lets go."
    )
    dry_run: bool = Field(False, description="List what would be purged; change nothing.")


@router.post("/purge", tags=["access"], response_class=JSONResponse)
def purge(principal: Caller, request: Request, wanted: Purge) -> Response:
    """Apply retention: delete expired versions' files (or exactly `versions`), never a protected
    one. Needs the admin group; a dry run, which any signed-in user may ask for, changes nothing and
    is not recorded."""
    service = service_of(request)
    custody = service.custody
    report = governed_purge(
        custody.store,
        custody.lake,
        custody.policy,
        identity_of(principal),
        service.specs(),
        [VersionRef.parse(version) for version in wanted.versions],
        dry_run=wanted.dry_run,
        details=recorded(principal),
    )
    return answer(asdict(report))
