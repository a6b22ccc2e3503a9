"""The OpenLineage endpoint: run events from tools Custody does not run (Spark's listener, Airflow's
provider, any OpenLineage client's HTTP transport), posted by a service account of the lineage group,
kept as received and joined to Custody's versions (see governance.service.intake)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from governance.errors import ServiceUnavailable
from governance.foreign.events import MAX_EVENTS, decoded
from governance.service.api import Caller, answer
from governance.service.context import MAX_BODY_BYTES, service_of

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
    intake = service_of(request).intake
    if intake is None:
        raise ServiceUnavailable("this service takes no lineage reports")
    body = decoded(await request.body(), request.headers.get("content-encoding"), MAX_BODY_BYTES)
    received = await intake.take(principal, body)
    return answer({"received": [each.to_dict() for each in received]})
