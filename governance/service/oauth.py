"""OAuth 2.0's token endpoint, for the client credentials grant (RFC 6749, 4.4): the clients that
renew a short-lived token by themselves post it, OpenLineage's `oauth2` token provider (Airflow's
provider, Spark's listener) and Iceberg's REST clients (`credential=`) among them. The client is a
directory user, a service account most often, and its secret the user's password, sent in HTTP
Basic (`client_secret_basic`) or in the form (`client_secret_post`). Each token is a sign-in, with
what every sign-in has: recorded, slowed when guesses come, and lasting CUSTODY_TOKEN_SECONDS."""

from __future__ import annotations

import base64
import binascii
from urllib.parse import parse_qsl, unquote_plus

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from governance.errors import NotSignedIn, ServiceUnavailable, TokenRequestRefused, shown
from governance.service.api import token_for
from governance.service.context import service_of

PATH = "/oauth/tokens"
FORM = "application/x-www-form-urlencoded"
GRANT = "client_credentials"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
# A token is never kept by a cache between the service and the client (RFC 6749, 5.1).
NOT_KEPT = {"Cache-Control": "no-store", "Pragma": "no-cache"}
REALM = 'Basic realm="custody"'

router = APIRouter(prefix="/api/v1")


TOKEN_REQUEST = {
    "required": True,
    "content": {
        FORM: {
            "schema": {
                "type": "object",
                "required": ["grant_type"],
                "properties": {
                    "grant_type": {"type": "string", "enum": [GRANT]},
                    "client_id": {"type": "string", "description": "The user, unless given in HTTP Basic."},
                    "client_secret": {"type": "string", "description": "Their password, unless in HTTP Basic."},
                    "scope": {"type": "string", "description": "Taken, and not used: a token is the user's."},
                },
            }
        }
    },
}


@router.post(PATH, tags=["tokens"], response_class=JSONResponse, openapi_extra={"requestBody": TOKEN_REQUEST})
async def oauth_token(request: Request) -> Response:
    """A token for a directory user by OAuth 2.0's client credentials grant: a form with
    `grant_type=client_credentials`, the user and password as the client's id and secret, in HTTP
    Basic or in the form. The answer is RFC 6749's: `access_token`, `token_type`, `expires_in`."""
    return await token_answer(request)


async def token_answer(request: Request) -> Response:
    """What the token endpoint answers `request`: a token, or RFC 6749's error."""
    try:
        client, secret = _client(request, await _form(request))
        _, token = await token_for(request, client, secret, via="oauth2 client credentials")
    except TokenRequestRefused as err:
        return _refused(err.error, str(err), err.status)
    except NotSignedIn as err:
        return _refused("invalid_client", str(err), 401)
    except ServiceUnavailable as err:
        return _refused("temporarily_unavailable", str(err), 503)
    lifetime = int(service_of(request).tokens.lifetime.total_seconds())
    answer = {"access_token": token, "token_type": "Bearer", "expires_in": lifetime, "issued_token_type": ACCESS_TOKEN}
    return JSONResponse(answer, headers=NOT_KEPT)


async def _form(request: Request) -> dict[str, str]:
    """The request's form: each parameter once, `grant_type` the client credentials grant."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != FORM:
        raise TokenRequestRefused("invalid_request", f"send the token request as a form ({FORM}), as RFC 6749 has it")
    try:
        pairs = parse_qsl((await request.body()).decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError) as err:
        raise TokenRequestRefused("invalid_request", f"the form cannot be read: {shown(str(err), 120)}") from err
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in form:
            raise TokenRequestRefused("invalid_request", f"the form gives {shown(name)} more than once")
        form[name] = value
    grant = form.get("grant_type")
    if grant is None:
        raise TokenRequestRefused(
            "invalid_request", "the form gives no grant_type: this endpoint takes client_credentials"
        )
    if grant != GRANT:
        raise TokenRequestRefused(
            "unsupported_grant_type", f"grant_type {shown(grant)}: this endpoint takes {GRANT} only"
        )
    return form


def _client(request: Request, form: dict[str, str]) -> tuple[str, str]:
    """The client's id and secret, from HTTP Basic (each form-encoded, RFC 6749 2.3.1) or the form,
    never both."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    in_form = "client_id" in form or "client_secret" in form
    if scheme.lower() == "basic":
        if in_form:
            raise TokenRequestRefused(
                "invalid_request", "give the client's credentials once: in HTTP Basic or in the form"
            )
        try:
            client, colon, secret = base64.b64decode(given.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise TokenRequestRefused("invalid_client", "the HTTP Basic credentials cannot be read", 401) from err
        if not colon:
            raise TokenRequestRefused("invalid_client", "the HTTP Basic credentials name no secret", 401)
        return unquote_plus(client), unquote_plus(secret)
    if scheme:
        raise TokenRequestRefused(
            "invalid_client", f"Authorization {shown(scheme)}: give the client's credentials in Basic", 401
        )
    if not form.get("client_id") or not form.get("client_secret"):
        raise TokenRequestRefused(
            "invalid_client", "give the client's id and secret: in HTTP Basic or in the form", 401
        )
    return form["client_id"], form["client_secret"]


def _refused(error: str, description: str, status: int) -> Response:
    """RFC 6749's error answer (5.2); a client refused is told how to authenticate."""
    headers = {**NOT_KEPT, **({"WWW-Authenticate": REALM} if status == 401 else {})}
    return JSONResponse({"error": error, "error_description": description}, status, headers=headers)
