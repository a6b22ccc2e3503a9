"""The API's streams routes: the caller's own credential on the Kafka cluster, which the service
issues with Custody's principal there; the client needs no Kafka secret of its own."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from governance.service.api import Caller, answer, identity_of
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")
# A password is never kept by a cache between the service and the client.
NOT_KEPT = {"Cache-Control": "no-store", "Pragma": "no-cache"}


@router.post("/streams/credentials", tags=["streams"])
def credentials(principal: Caller, request: Request) -> Response:
    """A new SCRAM-SHA-512 password for the caller's own principal on the Kafka cluster, shown once;
    the previous one stops working. Recorded, and refused for a credential Custody did not issue."""
    from governance.streams.broker import KafkaAdmin
    from governance.streams.credentials import issued
    from governance.streams.settings import KafkaSettings

    custody = service_of(request).custody
    admin = KafkaAdmin(KafkaSettings.from_env(custody.environ))
    reply = answer(issued(custody.store, admin, identity_of(principal)))
    reply.headers.update(NOT_KEPT)
    return reply
