"""What the service's app does around its routes: a body sent to the API is JSON, and no page of
another site may show an answer in a frame."""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from governance.errors import shown
from governance.lake.engines import ICEBERG_PATH

JSON = "application/json"
WITH_BODY = frozenset({"POST", "PUT", "PATCH"})
# The Dagster UI shows a notebook's page in a frame of its own pages: those alone may frame it.
FRAMED_BY_THE_UI = frozenset({"/notebook", "/dagit/notebook"})


def sends_json(headers: Headers) -> bool:
    """Whether a request says its body is JSON: `application/json`, with parameters or without
    (OpenLineage's Java client, in Spark's listener, adds `charset=UTF-8`)."""
    return headers.get("content-type", "").partition(";")[0].strip().lower() == JSON


def refusal(scope: Scope, detail: str, status: int) -> Response:
    """A request refused before it reaches a route, in the shape its clients read: Iceberg's error
    model under the catalog's path, else the API's."""
    if scope["path"].startswith(ICEBERG_PATH + "/"):
        from governance.service.iceberg.errors import error_response

        return error_response(detail, status, "BadRequestException")
    return JSONResponse({"detail": detail}, status_code=status)


class JsonBodies:
    """Refuses with 415 a request under `prefix` (to `taker`) whose body does not say it is JSON, before
    it reaches a route. A page of another site may send a form, a text or a body of no type without
    asking first; a JSON body only once the service agrees (CORS), which it never does: behind a
    gateway whose sign-in the browser sends along, the API takes nothing such a page sends."""

    def __init__(self, app: ASGIApp, prefix: str, taker: str = "the API", forms: tuple[str, ...] = ()):
        self.app = app
        self.prefix = prefix.rstrip("/") + "/"
        self.taker = taker
        # Paths that take a form instead, answering it themselves.
        self.forms = frozenset(forms)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] == "http"
            and scope["method"] in WITH_BODY
            and path.startswith(self.prefix)
            and path not in self.forms
        ):
            headers = Headers(scope=scope)
            if not sends_json(headers):
                given = headers.get("content-type")
                refused = (
                    f"Content-Type {shown(given)!r} is refused" if given else "a body of no Content-Type is refused"
                )
                detail = f"{refused}: {self.taker} takes JSON, sent as {JSON}"
                await refusal(scope, detail, 415)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Unframed:
    """Says, with every answer, that no page may show it in a frame: a page of another site could show
    the login or the UI under its own, and have a person click what they do not see (clickjacking).
    The pages the Dagster UI frames itself may be framed by the service's own pages alone."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        own = scope["path"] in FRAMED_BY_THE_UI
        options, ancestors = ("SAMEORIGIN", "'self'") if own else ("DENY", "'none'")

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Frame-Options"] = options
                # Beside any policy of the page's own: a browser holds a page to each policy it is sent.
                headers.append("Content-Security-Policy", f"frame-ancestors {ancestors}")
            await send(message)

        await self.app(scope, receive, sending)
