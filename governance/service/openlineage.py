"""The OpenLineage endpoint: run events from tools Custody does not run (Spark's listener, Airflow's
provider, any OpenLineage client's HTTP transport), posted by a service account of the lineage group,
kept as received and joined to Custody's versions."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from governance.access.guard import enforce
from governance.access.policy import Decision, Policy, Verb
from governance.errors import DirectoryUnavailable, error_summary
from governance.foreign.events import MAX_EVENTS, decoded, parse
from governance.foreign.join import receive
from governance.service.api import Caller, answer, identity_of, recorded
from governance.service.context import MAX_BODY_BYTES, service_of
from governance.service.sessions import Principal

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

    def receive_events() -> list[dict]:
        custody.deciding(
            lambda policy, settings: enforce(
                custody.store, report_decision(policy, principal), details=recorded(principal), settings=settings
            )
        )
        events = parse(body)
        return [received.to_dict() for received in receive(custody.store, custody.lake, events, principal.user)]

    return answer({"received": await run_in_threadpool(receive_events)})


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
