"""The budget dashboard at ``/dashboard``: server-rendered HTML for people, over the same
ledger as the API (no script, nothing fetched from elsewhere).

``GET /dashboard`` shows the login form until a session exists; ``POST /dashboard/login`` with
the API key (a form field ``key``) opens one (:mod:`veil.service.sessions`) and sets it in an
``HttpOnly``, ``SameSite=Strict`` cookie (``Secure`` over https); ``?before=ID`` shows the audit
table's charges older than ``ID`` (a page at a time). A wrong, revoked or rotated
key gets the same answer: the form and one message, nothing else. ``POST /dashboard/logout``
ends the session; ``GET /dashboard/audit.csv`` downloads the audit trail the viewer may see
(an administrator: the ledger's whole CSV export; an analyst: their own events).

The routes are left out of the OpenAPI document: they answer HTML to a browser, not the API's
JSON and problem documents.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from veil.accounting.records import to_csv
from veil.service.dashboard_data import overview, own_events_csv_rows
from veil.service.dashboard_html import Paths, dashboard_page, login_page, message_page
from veil.service.principals import Principal
from veil.service.sessions import Login, SessionStore
from veil.service.state import ServiceState, state_of

__all__ = ["COOKIE", "router"]

COOKIE = "veil_session"

WRONG_KEY = (
    "That key was not accepted. Check that you pasted all of it; a key that was rotated or "
    "revoked no longer works (an administrator can give you a new one)."
)
ENDED = "Your session has ended (it expired, or its key was rotated or revoked). Log in again."
LOGGED_OUT = "You are logged out."

# no script may run, nothing is loaded from anywhere, no other site may frame or post here
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

router = APIRouter(prefix="/dashboard", include_in_schema=False)

_store_lock = threading.Lock()


def _sessions(request: Request) -> SessionStore:
    """The app's session store, created on first use (it makes its table if missing)."""
    app_state = request.app.state
    store: SessionStore | None = getattr(app_state, "veil_sessions", None)
    if store is None:
        with _store_lock:
            store = getattr(app_state, "veil_sessions", None)
            if store is None:
                store = SessionStore(state_of(request).principals)
                app_state.veil_sessions = store
    return store


def _paths(request: Request) -> Paths:
    return Paths(str(request.scope.get("root_path", "")).rstrip("/"))


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers=HEADERS)


def _login(request: Request, message: str | None = None, *, status: int = 200) -> HTMLResponse:
    error = message is not None and message != LOGGED_OUT
    return _html(login_page(_paths(request), message, error=error), status)


def _forget_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE,
        path=_paths(request).home,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def _same_origin(request: Request) -> bool:
    """False for a form posted from another site: a browser says so in ``Sec-Fetch-Site``, or
    names another host in ``Origin`` (sent with every POST; ``null`` when it hides it)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser's form (curl, a script): nothing to forge
    return origin != "null" and urlsplit(origin).netloc == request.headers.get("host", "")


async def _viewer(request: Request) -> Login | None:
    secret = request.cookies.get(COOKIE)
    if not secret:
        return None
    state = state_of(request)
    return await state.run(lambda: _sessions(request).get(secret))


def _throttled(state: ServiceState, request: Request, who: Principal) -> HTMLResponse | None:
    wait = state.limiter.take(who.name)
    if wait is None:
        return None
    page = message_page(
        _paths(request), "Too many requests", f"Wait {wait} s before loading the page again."
    )
    response = _html(page, 429)
    response.headers["Retry-After"] = str(wait)
    return response


@router.get("", response_class=HTMLResponse)
async def dashboard(request: Request) -> Response:
    state = state_of(request)
    login = await _viewer(request)
    if login is None:
        if request.cookies.get(COOKIE):
            response = _login(request, ENDED)
            _forget_cookie(response, request)
            return response
        return _login(request, LOGGED_OUT if "logged_out" in request.query_params else None)
    request.scope["veil_principal"] = login.principal.name
    refused = _throttled(state, request, login.principal)
    if refused is not None:
        return refused
    now = datetime.now(UTC)
    before = _cursor(request.query_params.get("before"))
    view = await state.run(lambda: overview(state.ledger, login.principal, now, before=before))
    return _html(dashboard_page(view, _paths(request)))


def _cursor(value: str | None) -> int | None:
    """The audit table's ``?before=`` cursor; anything but a positive id is the first page."""
    if value is None or not value.isdigit() or len(value) > 18 or int(value) < 1:
        return None
    return int(value)


@router.post("/login", response_class=HTMLResponse)
async def log_in(request: Request) -> Response:
    if not _same_origin(request):
        return _html(message_page(_paths(request), "Refused", "A form from another site."), 403)
    body = (await request.body()).decode("utf-8", errors="replace")
    fields: dict[str, Any] = parse_qs(body, max_num_fields=4)
    key = (fields.get("key") or [""])[0].strip()
    state = state_of(request)
    opened = await state.run(lambda: _sessions(request).open(key)) if key else None
    if opened is None:
        return _login(request, WRONG_KEY, status=401)
    secret, login = opened
    response = RedirectResponse(_paths(request).home, status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        secret,
        max_age=int(_sessions(request).ttl_s),
        path=_paths(request).home,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    request.scope["veil_principal"] = login.principal.name
    return response


@router.post("/logout", response_class=HTMLResponse)
async def log_out(request: Request) -> Response:
    if not _same_origin(request):
        return _html(message_page(_paths(request), "Refused", "A form from another site."), 403)
    secret = request.cookies.get(COOKIE)
    if secret:
        state = state_of(request)
        await state.run(lambda: _sessions(request).close(secret))
    response = RedirectResponse(
        f"{_paths(request).home}?logged_out=1", status_code=303, headers=HEADERS
    )
    _forget_cookie(response, request)
    return response


@router.get("/audit.csv", response_model=None)
async def audit_csv(request: Request) -> Response:
    login = await _viewer(request)
    if login is None:
        return RedirectResponse(_paths(request).home, status_code=303, headers=HEADERS)
    state = state_of(request)
    refused = _throttled(state, request, login.principal)
    if refused is not None:
        return refused
    who = login.principal
    if who.is_admin:
        text = await state.run(state.ledger.export_csv)
    else:
        text = await state.run(lambda: to_csv(own_events_csv_rows(state.ledger, who.name)))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return PlainTextResponse(
        text,
        media_type="text/csv",
        headers={
            **HEADERS,
            "Content-Disposition": f'attachment; filename="veil-audit-{stamp}.csv"',
        },
    )
