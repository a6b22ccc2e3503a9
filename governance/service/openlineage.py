"""The OpenLineage endpoint: run events from tools Custody does not run (Spark's listener, Airflow's
provider, any OpenLineage client's HTTP transport), posted by a service account of the lineage group,
kept as received and joined to Custody's versions (see governance.service.intake)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from governance.errors import CustodyError, NotSignedIn, ServiceUnavailable
from governance.foreign.events import MAX_EVENTS, decoded
from governance.jsontext import json_bytes
from governance.service.api import Caller
from governance.service.context import MAX_BODY_BYTES, Service, service_of
from governance.service.middleware import sends_json
from governance.service.sessions import Principal

PREFIX = "/api/v1"
PATH = f"{PREFIX}/lineage"
router = APIRouter(prefix=PREFIX)

ONE_EVENT = [
    {"$ref": f"https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/{kind}"}
    for kind in ("RunEvent", "DatasetEvent", "JobEvent")
]
EVENTS_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "description": (
                    f"One OpenLineage event (a run event, or a dataset or job event), or a list of at most "
                    f"{MAX_EVENTS:,}; gzip or deflate Content-Encoding allowed."
                ),
                "oneOf": [*ONE_EVENT, {"type": "array", "items": {"oneOf": ONE_EVENT}}],
            }
        }
    },
}


@router.post("/lineage", tags=["lineage"], response_class=JSONResponse, openapi_extra={"requestBody": EVENTS_BODY})
async def lineage_events(principal: Caller, request: Request) -> Response:
    """OpenLineage events, as OpenLineage's HTTP transport posts them, for the lineage group's
    service accounts: each is kept as received (the same run, type and time once), and each input
    of a run event that is a Custody version is joined to it; dataset and job events (static
    lineage) are kept too. The answer says what became of each event."""
    return await kept(service_of(request), principal, await request.body(), request.headers.get("content-encoding"))


async def kept(service: Service, principal: Principal, body: bytes, encoding: str | None) -> Response:
    """What became of each event the principal posted, as the endpoint answers it: 200, or 422
    when an event was refused (the others are kept all the same), so that a client that reads no
    answer logs it."""
    if service.intake is None:
        raise ServiceUnavailable("this service takes no lineage reports")
    received = await service.intake.take(principal, decoded(body, encoding, MAX_BODY_BYTES))
    status = 422 if any(each.refused is not None for each in received) else 200
    return Response(
        json_bytes({"received": [each.to_dict() for each in received]}), status, media_type="application/json"
    )


class Express:
    """The endpoint's requests from a client whose token the service holds already, taken before
    FastAPI's routing and dependencies, which cost a one-event request about as much as keeping it.
    Every other request (a first one, a gateway's, one whose body is not JSON, any other path) goes
    on to `app`; a refusal is answered by `refused`, as the app answers it."""

    def __init__(self, app: FastAPI, refused: Callable[[Request, Exception], Awaitable[Response]]):
        self.app = app
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = self._principal(scope) if scope["type"] == "http" else None
        if principal is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            body = await request.body()
            response = await kept(self.app.state.service, principal, body, request.headers.get("content-encoding"))
        except CustodyError as err:
            response = await self.refused(request, err)
        await response(scope, receive, send)

    def _principal(self, scope: Scope) -> Principal | None:
        if scope["method"] != "POST" or scope["path"] != PATH:
            return None
        service: Service = self.app.state.service
        headers = Headers(scope=scope)
        if service.gateway is not None or not sends_json(headers):  # a gateway's user comes first: see `caller`
            return None
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        try:
            return service.tokens.remembered(token.strip())
        except NotSignedIn:
            return None  # refused by the app, which records it
