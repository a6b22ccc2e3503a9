"""The API's tables route: each versioned asset's Iceberg table and the versions tagged in it, for
any signed-in user, as other engines read them."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from governance.errors import InvalidInput
from governance.lake.snapshots import table_listing
from governance.service.api import Caller, recent
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")


@router.get("/tables", tags=["tables"], response_class=JSONResponse)
async def tables(principal: Caller, request: Request) -> Response:
    """Each versioned asset's table, its tagged versions and current snapshot, as `custody tables
    list --json` (as of a moment ago at most: see CUSTODY_SERVICE_CACHE_SECONDS)."""
    custody = service_of(request).custody
    if custody.lake.tables is None:
        raise InvalidInput("CUSTODY_TABLES=off: versions are not kept as table snapshots")
    tables = custody.lake.tables.tables
    return await recent(request, lambda: table_listing(custody.store, tables))
