"""The OpenLineage endpoint: run events from tools Custody does not run (Spark's listener, Airflow's
provider, any OpenLineage client's HTTP transport), posted by a service account of the lineage group,
kept as received and joined to Custody's versions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from governance.access.guard import enforce
from governance.access.policy import Decision, Identity, Policy, Verb
from governance.errors import DirectoryUnavailable, error_summary
from governance.foreign.events import MAX_EVENTS, decoded, parse
from governance.foreign.join import FOREIGN_CHANNEL, Judge, receive
from governance.runs import Assurance
from governance.service.api import Caller, answer, identity_of, recorded
from governance.service.context import MAX_BODY_BYTES, decided, service_of
from governance.service.sessions import Principal
from governance.spec import SpecSet
from governance.zones import AssetKey

router = APIRouter(prefix="/api/v1")

EVENTS_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "description": (
                    f"One OpenLineage run event, or a list of at most {MAX_EVENTS:,}; gzip or deflate "
                    "Content-Encoding allowed."
                ),
                "oneOf": [
                    {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"},
                    {
                        "type": "array",
                        "items": {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"},
                    },
                ],
            }
        }
    },
}


@router.post("/lineage", tags=["lineage"], response_class=JSONResponse, openapi_extra={"requestBody": EVENTS_BODY})
async def lineage_events(principal: Caller, request: Request) -> Response:
    """OpenLineage run events, as OpenLineage's HTTP transport posts them, for the lineage group's
    service accounts: each is kept as received (the same run, type and time once), and each input
    that is a Custody version is joined to it. The answer says what became of each event."""
    service = service_of(request)
    custody = service.custody
    body = decoded(await request.body(), request.headers.get("content-encoding"), MAX_BODY_BYTES)

    def decide(policy: Policy, settings: Mapping[str, str]) -> Policy:
        decision = report_decision(policy, principal)
        enforce(custody.store, decision, details=recorded(principal), settings=settings)
        return policy

    policy = await decided(request, lambda: custody.deciding(decide))

    def receive_events() -> list[dict]:
        events = parse(body)
        judge = reader_judge(policy, cache(service.specs))
        return [received.to_dict() for received in receive(custody.store, custody.lake, events, principal.user, judge)]

    return answer({"received": await run_in_threadpool(receive_events)})


def reader_judge(policy: Policy, specs: Callable[[], SpecSet]) -> Judge:
    """Whether the user a foreign run reports may read an asset, by the roles they hold on it: a
    reported name proves nothing, but one that holds no role is a read to look into. The specs are
    read only once a version is read."""

    def judge(user: str | None, asset: str) -> str | None:
        if user is None:
            return "the run reported no user"
        identity = Identity(user, Assurance.ASSERTED, "reported", FOREIGN_CHANNEL)
        decision = policy.holds_role(identity, Verb.READ, specs().get(AssetKey.parse(asset)))
        return None if decision.allowed else decision.reason

    return judge


def report_decision(policy: Policy, principal: Principal) -> Decision:
    """Whether the principal may report lineage: a member of the lineage group. A directory that
    cannot be asked denies."""
    identity = identity_of(principal)
    try:
        groups = policy.directory.groups_of(principal.user)
    except DirectoryUnavailable as err:
        return Decision(identity, Verb.LINEAGE_REPORT, None, False, error_summary(err))
    if policy.lineage_group in groups:
        reason = f"{principal.user} reports lineage as a member of {policy.lineage_group}"
        return Decision(identity, Verb.LINEAGE_REPORT, None, True, reason)
    reason = f"{principal.user} may not report lineage: it needs the lineage group ({policy.lineage_group})"
    return Decision(identity, Verb.LINEAGE_REPORT, None, False, reason)
