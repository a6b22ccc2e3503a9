"""Refusals as Iceberg's REST clients read them: `{"error": {"message", "type", "code"}}`, whose
type names the exception Iceberg's Java client raises."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from governance.errors import (
    AccessDenied,
    CustodyError,
    InvalidInput,
    NoSuchNamespace,
    NotFound,
    NotSignedIn,
    RequestTooLarge,
    TransientError,
    UnsupportedRequest,
)
from governance.service.context import first_problem

# The status and type each kind of refusal answers with, the first that matches; anything else is 500.
KINDS: tuple[tuple[type[CustodyError], int, str], ...] = (
    (RequestTooLarge, 413, "BadRequestException"),
    (NotSignedIn, 401, "NotAuthorizedException"),
    (AccessDenied, 403, "ForbiddenException"),
    (NoSuchNamespace, 404, "NoSuchNamespaceException"),
    (NotFound, 404, "NoSuchTableException"),
    (UnsupportedRequest, 406, "UnsupportedOperationException"),
    (InvalidInput, 400, "BadRequestException"),
    (TransientError, 503, "ServiceUnavailableException"),
)


def error_response(message: str, status: int, kind: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers=headers)


async def refused(request: Request, err: Exception) -> Response:
    """A Custody error as the catalog answers it."""
    status, kind = next(
        ((code, name) for error, code, name in KINDS if isinstance(err, error)), (500, "ServiceFailureException")
    )
    return error_response(str(err).removeprefix("denied: "), status, kind)


async def invalid(request: Request, err: Exception) -> Response:
    """A request whose parameters or body do not fit: the first problem, in one line."""
    return error_response(first_problem(err), 400, "BadRequestException")
