"""The API's tables route: each versioned asset's Iceberg table and the versions tagged in it, for
any signed-in user, as other engines read them."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from governance.errors import InvalidInput
from governance.lake.snapshots import table_listing
from governance.service.api import Caller, answer
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")


@router.get("/tables", tags=["tables"], response_class=JSONResponse)
def tables(principal: Caller, request: Request) -> Response:
    """Each versioned asset's table, its tagged versions and current snapshot, as `custody tables list --json`."""
    custody = service_of(request).custody
    if custody.lake.tables is None:
        raise InvalidInput("CUSTODY_TABLES=off: versions are not kept as table snapshots")
    return answer(table_listing(custody.store, custody.lake.tables.tables))
