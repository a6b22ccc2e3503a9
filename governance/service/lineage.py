"""The API's column lineage and lineage pictures: which input columns each column of a version
derives from, a column's whole way back to the DropZone fields, and a version's lineage drawn (svg,
png) or for graph tools (dot, graphml, json), as `custody lineage columns|graph` give them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from governance.lineage.column_trace import column_lineage
from governance.lineage.pictures import bounded, content, lineage_graph
from governance.service.api import Caller, Version, answer
from governance.service.context import service_of

router = APIRouter(prefix="/api/v1")

MEDIA_TYPES = {
    "svg": "image/svg+xml",
    "png": "image/png",
    "dot": "text/vnd.graphviz",
    "graphml": "application/graphml+xml",
    "json": "application/json",
}
# The most nodes a picture may have unless the request allows more: a larger one is drawn by Graphviz
# for minutes, and read by nobody.
MAX_NODES = 5_000
# The most a request may allow: a larger lineage is read as data, a few levels at a time (…/provenance?depth=).
LARGEST = 50_000


@router.get("/versions/{domain}/{name}/{number}/columns", tags=["lineage"], response_class=JSONResponse)
def columns(principal: Caller, request: Request, ref: Version) -> Response:
    """Every column of the version and the input columns it derives from, DIRECT or INDIRECT, and how."""
    return answer(column_lineage(service_of(request).custody.store, ref))


@router.get("/versions/{domain}/{name}/{number}/columns/{column}", tags=["lineage"], response_class=JSONResponse)
def column(
    principal: Caller,
    request: Request,
    ref: Version,
    column: str,
    origins: Annotated[
        bool, Query(description="Only where the column's values begin: fields and their files.")
    ] = False,
    direct: Annotated[bool, Query(description="Only DIRECT dependencies: where the values flow from.")] = False,
) -> Response:
    """The column's whole way back, version by version, to the DropZone fields and their files."""
    store = service_of(request).custody.store
    return answer(column_lineage(store, ref, column, origins_only=origins, direct_only=direct))


@router.get(
    "/versions/{domain}/{name}/{number}/graph",
    tags=["lineage"],
    response_class=Response,
    responses={200: {"content": {media: {} for media in MEDIA_TYPES.values()}, "description": "The drawing."}},
)
def graph(
    principal: Caller,
    request: Request,
    ref: Version,
    kind: Annotated[Literal["svg", "png", "dot", "graphml", "json"], Query(alias="format")] = "svg",
    impact: Annotated[
        bool, Query(description="Every version built from it, instead of those it was built from.")
    ] = False,
    column: Annotated[str | None, Query(description="The lineage of this column, back to its DropZone fields.")] = None,
    depth: Annotated[int | None, Query(ge=0)] = None,
    max_nodes: Annotated[int, Query(ge=1, le=LARGEST)] = MAX_NODES,
    runs: Annotated[bool, Query(description="Each run of other tools' jobs a node, rather than each job.")] = False,
) -> Response:
    """The version's lineage drawn as `custody lineage graph` draws it. The headers X-Custody-Nodes
    and X-Custody-Edges count what it holds."""
    store = service_of(request).custody.store
    drawn = bounded(
        lineage_graph(store, ref, impact=impact, column=column, depth=depth, every_run=runs),
        max_nodes,
        "max_nodes",
        "depth",
    )
    headers = {"X-Custody-Nodes": str(len(drawn)), "X-Custody-Edges": str(len(drawn.edges))}
    return Response(content(drawn, kind), media_type=MEDIA_TYPES[kind], headers=headers)
