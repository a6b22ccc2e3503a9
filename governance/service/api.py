"""The service's HTTP API under /api/v1, for producers, consumers and auditors who hold none of the
catalog's, the lake's or the directory's credentials: a token from a directory password, then the
catalog, versions, lineage, the ledger (for auditors) and the rows of a version (for entitled users,
as an Arrow IPC stream). Reads of data and the ledger are decided and recorded with channel `api`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Literal

import pyarrow as pa
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool

from governance import ledger
from governance.access.guard import enforce
from governance.access.policy import Identity, Verb
from governance.access.reads import Target, open_version, read_table
from governance.catalog import Catalog
from governance.catalog.entries import Filters
from governance.catalog.listing import detail, listing
from governance.catalog.models import VersionRow
from governance.errors import (
    AccessDenied,
    InvalidInput,
    NotFound,
    NotSignedIn,
    ServiceUnavailable,
    shown,
)
from governance.jsontext import json_bytes
from governance.lineage.graph import explore
from governance.lineage.readers import readers
from governance.lineage.terms import Direction
from governance.runs import Assurance
from governance.service.context import decided, peer_of, service_of
from governance.service.gateway import METHOD as GATEWAY_METHOD
from governance.service.sessions import Principal, new_session_id, reference_of
from governance.zones import LARGEST_NUMBER, AssetKey, Lake, VersionRef

API_CHANNEL = "api"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
# The most rows one request reads: more is a job for Spark next to the lake, not for HTTP.
MAX_ROWS = 100_000
MAX_LEDGER_ENTRIES = 10_000

router = APIRouter(prefix="/api/v1")


async def caller(request: Request) -> Principal:
    """The principal of a request to the API: see `authenticated`."""
    return await authenticated(request, API_CHANNEL)


async def authenticated(request: Request, channel: str) -> Principal:
    """The principal of a request by `channel`: a trusted gateway's user, else the bearer token's,
    read from the catalog only when it was not a moment ago. A refusal is recorded (once a minute
    for the same peer and kind)."""
    service = service_of(request)
    try:
        vouched = service.gateway.principal(request) if service.gateway is not None else None
        if vouched is not None:
            return replace(vouched, channel=channel)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise NotSignedIn("this needs a token: `custody login`, or POST /api/v1/tokens with a user and password")
        known = service.tokens.remembered(token.strip())
        if known is None:
            known = await run_in_threadpool(service.tokens.find, token.strip())
        return replace(known, channel=channel)
    except AccessDenied as err:
        await run_in_threadpool(service.refused, request, err, channel)
        raise


Caller = Annotated[Principal, Depends(caller)]


def answer(data: object, status_code: int = 200) -> Response:
    """`data` as JSON, encoded once: FastAPI's own encoder would walk a large lineage tree again."""
    return Response(json_bytes(data), status_code=status_code, media_type="application/json")


async def recent(request: Request, compute: Callable[[], object]) -> Response:
    """An answer every signed-in user gets alike, kept a moment by the request's path and query:
    a kept answer is sent at once (and renewed once it is past half its time, after it is sent),
    a new one computed in a worker thread."""
    key = (request.url.path, request.url.query)
    kept = service_of(request).recent

    def body() -> bytes:
        return json_bytes(compute())

    data = kept.fresh(key)
    if data is None:
        return Response(await run_in_threadpool(kept.answer, key, body), media_type="application/json")
    renewal = BackgroundTask(kept.renew, key, body) if kept.renewal_due(key) else None
    return Response(data, media_type="application/json", background=renewal)


def key_of(domain: str, name: str) -> AssetKey:
    return AssetKey.parse(f"{domain}/{name}")


def version_of(domain: str, name: str, number: int) -> VersionRef:
    """The version a path names; 404 for a number no catalog holds, which no query could look up."""
    return VersionRef.named(key_of(domain, name), number)


# A version the path names (`…/{domain}/{name}/{number}/…`).
Version = Annotated[VersionRef, Depends(version_of)]
# A number a query gives of what the catalog keeps (a version, a ledger entry): past the largest it
# can keep, a bad parameter.
Stored = Annotated[int, Field(ge=1, le=LARGEST_NUMBER)]


def identity_of(principal: Principal) -> Identity:
    return Identity(principal.user, Assurance.VERIFIED, principal.method, API_CHANNEL)


def recorded(principal: Principal) -> dict[str, str]:
    """What the ledger keeps of how a request reached us."""
    return {"channel": API_CHANNEL, "method": principal.method, "session": principal.reference}


class Login(BaseModel):
    user: str = Field(max_length=256)
    password: str = Field(max_length=1024)
    device: str | None = Field(
        None,
        max_length=512,
        description="The device token an earlier sign-in of this user's from this client gave it: "
        "failed sign-ins from other clients do not slow this one's.",
    )


class Token(BaseModel):
    token: str
    user: str
    method: str
    expires_in: int = Field(description="Seconds the token stays valid.")
    device: str = Field(description="This client's device token for the user: send it with the next sign-in.")


class Who(BaseModel):
    user: str
    method: str


@router.post("/tokens", status_code=201, response_model=Token, tags=["tokens"])
async def issue_token(login: Login, request: Request) -> Token:
    """A short-lived token for a directory user, proven by their password (recorded either way)."""
    service = service_of(request)
    devices, _ = service.sign_ins()
    device = devices.of(login.device, login.user)
    principal, token = await token_for(request, login.user, login.password, device)
    return Token(
        token=token,
        user=principal.user,
        method=principal.method,
        expires_in=int(service.tokens.lifetime.total_seconds()),
        device=devices.issue(login.user, device),
    )


async def token_for(
    request: Request, user: str, password: str, device: str | None = None, **details: str
) -> tuple[Principal, str]:
    """A new token of `user`, once the directory says `password` is theirs: the sign-in recorded,
    with `details`, whether it succeeds or not, and slowed as every sign-in is when guesses come."""
    service = service_of(request)
    _, signins = service.sign_ins()
    session_id = new_session_id()
    details = {"channel": API_CHANNEL, "session": reference_of(session_id), "peer": peer_of(request), **details}
    refusals = service.refused_login(request)
    try:
        await signins.check(
            user,
            device is not None,
            lambda: service.custody.authenticate(user, password, details=details, device=device, refusals=refusals),
        )
    except AccessDenied as err:
        raise NotSignedIn(str(err).removeprefix("denied: ")) from err
    except ServiceUnavailable as err:
        await run_in_threadpool(service.refused, request, err, API_CHANNEL, user)
        raise
    return await run_in_threadpool(service.tokens.open, session_id, user, service.custody.policy.directory.method)


@router.delete("/tokens/current", status_code=204, tags=["tokens"])
def revoke_token(principal: Caller, request: Request) -> Response:
    """End the token the request carries, for every copy of it."""
    if principal.method == GATEWAY_METHOD:
        raise InvalidInput("this request carries no token: the gateway names its user, and ends its own sessions")
    service = service_of(request)
    service.end(service.tokens, principal, API_CHANNEL)
    return Response(status_code=204)


@router.get("/whoami", response_model=Who, tags=["tokens"])
def whoami(principal: Caller) -> Who:
    """Who the token or gateway says the caller is, and how they proved it."""
    return Who(user=principal.user, method=principal.method)


@router.get("/catalog", tags=["catalog"], response_class=JSONResponse)
async def catalog(
    principal: Caller,
    request: Request,
    search: str | None = None,
    domain: str | None = None,
    classification: str | None = None,
    owner: str | None = None,
) -> Response:
    """Every asset, as `custody catalog --json` lists it (as of a moment ago at most: see
    CUSTODY_SERVICE_CACHE_SECONDS)."""
    store = service_of(request).custody.store
    return await recent(
        request, lambda: [entry.to_dict() for entry in listing(store, Filters(search, domain, classification, owner))]
    )


@router.get("/assets/{domain}/{name}", tags=["catalog"], response_class=JSONResponse)
def asset(principal: Caller, request: Request, domain: str, name: str) -> Response:
    """One asset whole: its spec in force, columns, versions, inputs and dependents."""
    return answer(detail(service_of(request).custody.store, key_of(domain, name)).to_dict())


@router.get("/assets/{domain}/{name}/versions", tags=["catalog"], response_class=JSONResponse)
def versions(
    principal: Caller,
    request: Request,
    domain: str,
    name: str,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    before: Stored | None = None,
) -> Response:
    """A page of an asset's versions, the newest first unless `before` says where the page ends. The
    header X-Custody-Versions gives how many versions the asset has in all."""
    store = service_of(request).custody.store
    key = key_of(domain, name)
    total = store.version_count(key)
    if not total and not store.has_asset(key):
        raise NotFound(f"unknown asset {key}: no version and no spec registered")
    page = answer([row.model_dump(mode="json") for row in store.versions_page(key, limit, before)])
    page.headers["X-Custody-Versions"] = str(total)
    return page


@router.get("/versions/{domain}/{name}/{number}/readers", tags=["ledger"], response_class=JSONResponse)
async def version_readers(
    principal: Caller, request: Request, ref: Version, depth: Annotated[int | None, Query(ge=1)] = None
) -> Response:
    """Everyone who read the version, or a version built from it, through any channel, as `custody
    impact --readers --json`: for the auditor and admin groups; the request is recorded."""
    await ledger_read(request, principal, readers=str(ref))
    found = await run_in_threadpool(readers, service_of(request).custody.store, ref, depth)
    return answer([reader.to_dict() for reader in found])


@router.get("/versions/{domain}/{name}/{number}/{direction}", tags=["lineage"], response_class=JSONResponse)
async def lineage(
    principal: Caller,
    request: Request,
    ref: Version,
    direction: Literal["provenance", "impact"],
    depth: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    """A version's provenance (the upstream tree: inputs, runs, code, requesters, source files) or
    impact (every version built from it), as `custody provenance|impact --json`: its summary past
    the size the CLI summarizes at."""
    way = Direction.UPSTREAM if direction == "provenance" else Direction.DOWNSTREAM
    store = service_of(request).custody.store
    return await recent(request, lambda: explore(store, ref, way, depth).to_dict())


@router.get(
    "/assets/{domain}/{name}/rows",
    tags=["data"],
    response_class=Response,
    responses={200: {"content": {ARROW_STREAM: {}}, "description": "The rows, as an Arrow IPC stream."}},
)
async def rows(
    principal: Caller,
    request: Request,
    domain: str,
    name: str,
    version: Annotated[Stored | None, Query(description="The version; its newest committed one if left out.")] = None,
    limit: Annotated[int, Query(ge=0, le=MAX_ROWS)] = 1000,
    column: Annotated[list[str] | None, Query()] = None,
) -> Response:
    """The rows of a version, for a consumer, producer or owner of its asset: decided and recorded.
    The headers X-Custody-Version and X-Custody-Rows name the version and its whole row count."""
    service = service_of(request)
    custody = service.custody
    target = Target(key_of(domain, name), version)

    def decide() -> VersionRow:
        spec = service.specs().get(target.key)
        return custody.deciding(
            lambda policy, settings: open_version(
                custody.store,
                policy,
                spec,
                identity_of(principal),
                target,
                details=recorded(principal),
                settings=settings,
            )
        )

    row = await decided(request, decide)
    stream = await run_in_threadpool(arrow_stream, custody.lake, row, limit, column)
    headers = {"X-Custody-Version": row.ref, "X-Custody-Rows": str(row.rows)}
    return Response(stream, media_type=ARROW_STREAM, headers=headers)


def arrow_stream(lake: Lake, row: VersionRow, limit: int, columns: list[str] | None) -> bytes:
    """The first `limit` rows of a version, of the `columns` asked for, as an Arrow IPC stream."""
    table = read_table(lake, row, limit=limit, columns=columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@router.get("/ledger", tags=["ledger"], response_class=JSONResponse)
async def ledger_entries(
    principal: Caller,
    request: Request,
    asset: str | None = None,
    version: Stored | None = None,
    actor: str | None = None,
    action: str | None = None,
    run: str | None = None,
    since: str | None = None,
    until: str | None = None,
    from_seq: Stored = 1,
    limit: Annotated[int, Query(ge=1, le=MAX_LEDGER_ENTRIES)] = 1000,
) -> Response:
    """Ledger entries in sequence order, for the auditor and admin groups: the request is recorded.
    A page that holds `limit` entries cannot gain one (age-off alone takes entries away), and is kept
    a moment like the catalog's answers (CUSTODY_SERVICE_CACHE_SECONDS); a shorter one, the
    ledger's tail, is read every time."""
    service = service_of(request)
    custody = service.custody
    await ledger_read(request, principal)
    where = ledger.LedgerFilter.asked(
        asset=asset,
        version=version,
        actor=actor,
        action=action,
        run_id=run,
        since=since or None,
        until=until or None,
        from_seq=from_seq,
        limit=limit,
    )
    page = service.ledger_pages.fresh(where)
    if page is None:
        found = await run_in_threadpool(_ledger_page, custody.store, where)
        page = found.json.encode()
        if found.full(where):
            service.ledger_pages.keep(where, page)
    return Response(page, media_type="application/json")


async def ledger_read(request: Request, principal: Principal, **details: str) -> None:
    """Decide and record the caller's read of the ledger (with `details`): only auditors and admins may."""
    custody = service_of(request).custody
    await decided(
        request,
        lambda: custody.deciding(
            lambda policy, settings: enforce(
                custody.store,
                policy.decide(identity_of(principal), Verb.LEDGER_READ, None),
                details={**recorded(principal), **details},
                settings=settings,
            )
        ),
    )


def _ledger_page(store: Catalog, where: ledger.LedgerFilter) -> ledger.JsonPage:
    with store.reading() as session:
        return ledger.entries_json(session, where)


unknown = APIRouter(prefix="/api/v1")


@unknown.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
def no_such_path(path: str) -> None:
    raise NotFound(f"the API has no /api/v1/{shown(path, 200)}: /api/docs lists what it has")
