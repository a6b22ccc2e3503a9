"""The login and logout of the UI: a form that checks the password with the directory (a bind for
LDAP, the stored hash for the file directory), then a signed, HttpOnly, SameSite session cookie.
Both forms carry a token that must match a cookie of the same browser, and Origin is checked too."""

from __future__ import annotations

import hmac
import secrets
from html import escape
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from governance.errors import AccessDenied, NotSignedIn, ServiceUnavailable
from governance.service.context import CSRF_COOKIE, SESSION_COOKIE, cross_site, peer_of, service_of
from governance.service.devices import DEVICE_COOKIE
from governance.service.devices import LIFETIME as DEVICE_LIFETIME
from governance.service.gate import UI_CHANNEL
from governance.service.pages import login_page, logout_page
from governance.service.sessions import Principal, new_session_id, reference_of

router = APIRouter(include_in_schema=False)

User = Annotated[str, Form(max_length=256)]
Password = Annotated[str, Form(max_length=1024)]
Token = Annotated[str, Form(max_length=128)]


@router.get("/login")
def show_login(request: Request, next: str = "/") -> Response:
    return _login_form(request, _local(next))


@router.post("/login")
async def sign_in(request: Request, user: User, password: Password, csrf: Token, next: str = Form("/")) -> Response:
    service = service_of(request)
    target = _local(next)
    refusal = _forged(request, csrf)
    if refusal is not None:
        await run_in_threadpool(service.refused, request, refusal, UI_CHANNEL, user)
        return _login_form(request, target, refusal, user, status=403)
    devices, signins = service.sign_ins()
    device = devices.of(request.cookies.get(DEVICE_COOKIE), user)
    session_id = new_session_id()
    details = {"channel": UI_CHANNEL, "session": reference_of(session_id), "peer": peer_of(request)}
    try:
        await signins.check(
            user,
            device is not None,
            lambda: service.custody.authenticate(
                user, password, details=details, device=device, refusals=service.refused_login(request)
            ),
        )
    except AccessDenied as err:
        return _login_form(request, target, str(err).removeprefix("denied: "), user, status=401)
    except ServiceUnavailable as err:
        await run_in_threadpool(service.refused, request, err, UI_CHANNEL, user)
        return _login_form(request, target, str(err), user, status=503)
    _, cookie = await run_in_threadpool(
        service.sessions.open, session_id, user, service.custody.policy.directory.method
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=int(service.sessions.lifetime.total_seconds()),
        httponly=True,
        samesite="lax",
        secure=_over_tls(request),
    )
    response.set_cookie(
        DEVICE_COOKIE,
        devices.issue(user, device),
        max_age=int(DEVICE_LIFETIME.total_seconds()),
        httponly=True,
        samesite="strict",
        secure=_over_tls(request),
    )
    response.delete_cookie(CSRF_COOKIE)
    return response


@router.get("/logout")
async def show_logout(request: Request) -> Response:
    try:
        principal = await run_in_threadpool(_principal, request)
    except NotSignedIn:
        return RedirectResponse("/login", status_code=303)
    token = secrets.token_urlsafe(24)
    response = HTMLResponse(logout_page(token, principal.user))
    _set_csrf(request, response, token)
    return response


@router.post("/logout")
def sign_out(request: Request, csrf: Token) -> Response:
    service = service_of(request)
    refusal = _forged(request, csrf)
    if refusal is not None:
        service.refused(request, refusal, UI_CHANNEL)
        return HTMLResponse(escape(refusal), status_code=403)
    try:
        principal = _principal(request)
    except NotSignedIn:
        return RedirectResponse("/login", status_code=303)
    service.end(service.sessions, principal, UI_CHANNEL)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE)
    response.delete_cookie(CSRF_COOKIE)
    return response


def _principal(request: Request) -> Principal:
    return service_of(request).sessions.find(request.cookies.get(SESSION_COOKIE))


def _login_form(
    request: Request, target: str, problem: str | None = None, user: str = "", status: int = 200
) -> Response:
    token = secrets.token_urlsafe(24)
    response = HTMLResponse(login_page(token, target, problem, user), status_code=status)
    _set_csrf(request, response, token)
    return response


def _set_csrf(request: Request, response: Response, token: str) -> None:
    response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", secure=_over_tls(request))


def _forged(request: Request, token: str) -> str | None:
    """Why a form looks sent from elsewhere than this service's own page, or None."""
    reason = cross_site(request)
    if reason is not None:
        return str(reason)
    if not hmac.compare_digest(token.encode(), request.cookies.get(CSRF_COOKIE, "").encode()):
        return "this form has expired or was not sent by this service's page: load it again"
    return None


def _local(target: str) -> str:
    """Where to go after signing in: a path of this service, never another site."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _over_tls(request: Request) -> bool:
    """Whether the browser reached us over TLS: directly, or through a gateway that ends it, which
    the page's own origin says (a browser sends it with every form)."""
    return request.url.scheme == "https" or request.headers.get("origin", "").startswith("https://")
