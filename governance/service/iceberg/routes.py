"""The Iceberg REST catalog's routes (apache/iceberg `open-api/rest-catalog-open-api.yaml`), read
side: configuration, namespaces, tables, a table's load, existence checks, credentials and metrics
reports. Every request carries a token of the service (or comes through its gateway); a write is
refused in the spec's error shape and recorded, for Custody's ingestion alone writes the lake."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from governance.access.policy import Decision, Verb
from governance.errors import CustodyError, InvalidInput, InvalidName, NotFound, UnsupportedRequest, shown
from governance.lake.iceberg import CATALOG_NAME
from governance.service import oauth
from governance.service.api import authenticated
from governance.service.context import Service, decided, peer_of
from governance.service.iceberg.catalog import CHANNEL, VENDED, Asked, RestCatalog
from governance.service.iceberg.errors import invalid, refused
from governance.service.sessions import Principal
from governance.zones import AssetKey

PREFIX = CATALOG_NAME
TABLE = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
# What the catalog serves, as its configuration tells clients: nothing that writes.
ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    f"GET {TABLE}",
    f"HEAD {TABLE}",
    f"GET {TABLE}/credentials",
    f"POST {TABLE}/metrics",
)
# Iceberg's REST clients name the release they are in this header; others say who they are in the User-Agent.
CLIENT_VERSION = "x-client-version"
ENGINE_LENGTH = 120
# How a client says which ways of reading the table's files it takes (the spec's access delegation).
DELEGATION = "x-iceberg-access-delegation"
# Credentials are kept by no cache between the service and the engine.
NOT_KEPT = {"Cache-Control": "no-store"}


class ScanReport(BaseModel):
    """What a metrics report must hold for the catalog to take it: a scan's table and snapshot."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    report_type: str = Field(alias="report-type", max_length=64)
    table_name: str = Field(alias="table-name", max_length=1024)
    snapshot_id: int = Field(alias="snapshot-id")


class SignRequest(BaseModel):
    """A request an engine is about to make to the lake's store, to be signed (the spec's RemoteSignRequest)."""

    model_config = ConfigDict(extra="ignore")

    region: str = Field(max_length=64)
    uri: str = Field(max_length=4096)
    method: str = Field(max_length=16)
    headers: dict[str, list[Annotated[str, Field(max_length=8192)]]] = Field(max_length=64)
    provider: str = Field("s3", pattern="^s3$")


def engine_of(request: Request) -> str:
    """The engine a request comes from, as the ledger keeps it: Iceberg's Java client by the release
    it names, any other by its User-Agent."""
    version = request.headers.get(CLIENT_VERSION, "")
    agent = request.headers.get("user-agent", "")
    said = version if "iceberg" in version.lower() else agent or version
    return shown(said, ENGINE_LENGTH) if said else "unknown"


def wants_credentials(request: Request) -> bool:
    """Whether a client asks for vended credentials rather than remote signing: Iceberg's clients
    ask for credentials unless told otherwise, and a client that can sign is told to say so, for a
    signed request tells which version's files it reads."""
    asked = {way.strip().lower() for way in request.headers.get(DELEGATION, "").split(",")}
    return VENDED in asked and "remote-signing" not in asked


async def asking(request: Request) -> Asked:
    principal: Principal = await authenticated(request, CHANNEL)
    return Asked(principal, engine_of(request), peer_of(request))


Caller = Annotated[Asked, Depends(asking)]


def catalog_of(request: Request) -> RestCatalog:
    rest: RestCatalog = request.app.state.catalog
    return rest


def checked_prefix(prefix: str) -> None:
    """The catalog a path names must be this service's, `custody`."""
    if prefix != PREFIX:
        raise NotFound(f"no catalog {shown(prefix)}: this service's is {PREFIX}")


def key_of(prefix: str, namespace: str, table: str | None = None) -> AssetKey:
    """The asset a path names: its namespace is the asset's domain (a path naming no table is
    checked with a name any table could have)."""
    checked_prefix(prefix)
    try:
        return AssetKey(namespace, table or "table")
    except InvalidName as err:
        raise InvalidInput(f"{shown(namespace)}.{shown(table or '')} names no table: {err}") from err


def json_response(data: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(data), status_code=status, media_type="application/json", headers=headers)


def create_iceberg_app(service: Service) -> FastAPI:
    """The catalog as an app of its own, mounted at /iceberg: its refusals take the spec's shape."""
    app = FastAPI(title="Custody's Iceberg REST catalog", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    app.state.catalog = RestCatalog(service)
    app.add_exception_handler(CustodyError, refused)
    app.add_exception_handler(RequestValidationError, invalid)

    @app.post(f"/v1{oauth.PATH}")
    async def oauth_token(request: Request) -> Response:
        # Where Iceberg's REST clients ask for a token with `credential=<client id>:<secret>`.
        return await oauth.token_answer(request)

    @app.get("/v1/config")
    async def config(request: Request, asked: Caller, warehouse: str | None = None) -> Response:
        if warehouse not in (None, "", PREFIX):
            raise NotFound(f"no warehouse {shown(warehouse)}: this service's is {PREFIX}")
        signing = [f"POST {TABLE}/sign"] if catalog_of(request).signer is not None else []
        return json_response({"defaults": {}, "overrides": {"prefix": PREFIX}, "endpoints": [*ENDPOINTS, *signing]})

    @app.get("/v1/{prefix}/namespaces")
    async def namespaces(request: Request, asked: Caller, prefix: str, parent: str | None = None) -> Response:
        checked_prefix(prefix)
        if parent:
            return json_response({"namespaces": []})  # the domains hold no namespace
        keys = await run_in_threadpool(catalog_of(request).readable, asked.principal)
        return json_response({"namespaces": [[domain] for domain in sorted({key.domain for key in keys})]})

    @app.api_route("/v1/{prefix}/namespaces/{namespace}", methods=["GET", "HEAD"])
    async def namespace(request: Request, asked: Caller, prefix: str, namespace: str) -> Response:
        key_of(prefix, namespace)
        await run_in_threadpool(catalog_of(request).namespace, asked.principal, namespace)
        if request.method == "HEAD":
            return Response(status_code=204)
        return json_response({"namespace": [namespace], "properties": {}})

    @app.get("/v1/{prefix}/namespaces/{namespace}/tables")
    async def tables(request: Request, asked: Caller, prefix: str, namespace: str) -> Response:
        key_of(prefix, namespace)
        rest = catalog_of(request)
        keys = await run_in_threadpool(rest.namespace, asked.principal, namespace)
        body = '{"identifiers": [' + ", ".join(rest.names.shown(key) for key in keys) + "]}"
        return Response(body, media_type="application/json")

    @app.get(TABLE)
    async def load_table(
        request: Request,
        asked: Caller,
        prefix: str,
        namespace: str,
        table: str,
        snapshots: Annotated[str, Query(pattern="^(all|refs)$")] = "all",
    ) -> Response:
        # Every snapshot served is a version's, which a tag holds: `all` and `refs` are the same.
        key = key_of(prefix, namespace, table)
        rest = catalog_of(request)
        vend = wants_credentials(request)
        served, vended = await decided(request, lambda: rest.load(asked, key, vend=vend))
        body = (
            f'{{"metadata-location": {json.dumps(served.metadata_location)}, '
            f'"metadata": {served.metadata.model_dump_json()}, '
            f'"config": {json.dumps(rest.table_config(key, vended))}, '
            f'"storage-credentials": {json.dumps(rest.storage_credentials(key, vended))}}}'
        )
        return Response(body, media_type="application/json", headers=NOT_KEPT if vended else None)

    @app.head(TABLE)
    async def table_exists(request: Request, asked: Caller, prefix: str, namespace: str, table: str) -> Response:
        key = key_of(prefix, namespace, table)
        await run_in_threadpool(catalog_of(request).allowed, asked, key)
        return Response(status_code=204)

    @app.get(f"{TABLE}/credentials")
    async def credentials(request: Request, asked: Caller, prefix: str, namespace: str, table: str) -> Response:
        key = key_of(prefix, namespace, table)
        rest = catalog_of(request)
        vended = await decided(request, lambda: rest.vend(asked, key))
        return json_response({"storage-credentials": rest.storage_credentials(key, vended)}, headers=NOT_KEPT)

    @app.post(f"{TABLE}/metrics", status_code=204)
    async def metrics(
        request: Request, asked: Caller, prefix: str, namespace: str, table: str, report: ScanReport
    ) -> Response:
        key = key_of(prefix, namespace, table)
        if report.report_type != "scan-report":
            raise InvalidInput(f"report-type {shown(report.report_type)}: this catalog takes scan reports only")
        await decided(request, lambda: catalog_of(request).scanned(asked, key, report.snapshot_id))
        return Response(status_code=204)

    @app.post(f"{TABLE}/sign")
    async def sign(
        request: Request, asked: Caller, prefix: str, namespace: str, table: str, asking: SignRequest
    ) -> Response:
        key = key_of(prefix, namespace, table)
        rest = catalog_of(request)
        signed = rest.sign_at_once(asked, key, asking.method, asking.uri, asking.headers)
        if signed is None:
            signed = await decided(request, lambda: rest.sign(asked, key, asking.method, asking.uri, asking.headers))
        # Never kept by the client: each request is decided as it comes, a revoked role at once.
        return json_response({"uri": asking.uri, "headers": signed}, headers={"Cache-Control": "no-cache"})

    @app.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"])
    async def unserved(request: Request, asked: Caller, path: str) -> Response:
        said = f"{request.method} /iceberg/{shown(path, 200)}"
        if request.method in ("GET", "HEAD"):
            raise NotFound(f"the catalog has no {said}: GET /iceberg/v1/config lists what it serves")
        reason = f"{said} is refused: Custody's ingestion alone writes the lake, and this catalog only reads it"
        decision = Decision(asked.principal.identity(), Verb.SESSION, None, False, reason)
        await run_in_threadpool(service.refusals.refused, asked.peer, decision, asked.details(request=said))
        raise UnsupportedRequest(reason)

    return app
