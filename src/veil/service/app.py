"""The FastAPI application: :func:`create_app` from a :class:`ServiceConfig`, or
:func:`create_app_from_env` (the uvicorn factory ``veil serve`` starts in each worker process,
with the config file named by :data:`veil.service.config.CONFIG_ENV`).

Every response that is not a success is a problem document (:mod:`veil.service.problems`),
including FastAPI's own 404, 405 and 422 and anything unexpected (500, nothing about the data).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from veil.accounting.ledger import Ledger
from veil.catalog import Catalog
from veil.errors import InvalidArgumentError, VeilError
from veil.service import admin, analyst, apidoc, dashboard, logs, mechanism_api
from veil.service import responses as out
from veil.service.config import CONFIG_ENV, ServiceConfig
from veil.service.hotroute import HotQueries
from veil.service.jobs import JobStore
from veil.service.models import Problem as ProblemModel
from veil.service.principals import Principal, Principals
from veil.service.problems import (
    DATABASE_ERRORS,
    PROBLEMS,
    Problem,
    from_error,
    problem_response,
    responses,
)
from veil.service.ratelimit import RateLimiter
from veil.service.responses import ok
from veil.service.state import ServiceState
from veil.service.state import admin as administrator
from veil.service.upkeep import LedgerUpkeep

__all__ = ["OPENAPI_PATH", "create_app", "create_app_from_env"]

logger = logging.getLogger("veil.service")

OPENAPI_PATH = Path(__file__).with_name("openapi.json")
"""The committed OpenAPI document (``make`` nothing: a test checks it equals the served one)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DESCRIPTION = """\
Differentially private answers over HTTP: each analyst's budget, the catalog the data owner
set, and an audit trail, in one ledger database.

Authenticate with `Authorization: Bearer <key>` (keys are created with
`veil admin analyst add NAME`). Every error is an RFC 9457 problem document
(`application/problem+json`) whose `type` is listed at `GET /problems`.
"""


class Guard:
    """The outermost ASGI layer: stamps the arrival time, opens the request's log context
    (:mod:`veil.service.logs`: its id, answered in ``X-Request-ID``), refuses bodies over the
    size limit (413) before they are read in full, and records each request's route, status
    and latency in the metrics and its line in the access log."""

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.monotonic()
        scope["veil_arrival"] = start
        record, token = logs.begin(_header(scope, b"x-request-id"))
        rid = (b"x-request-id", record.request_id.encode("ascii"))
        limit = self.state.config.limits.max_request_bytes
        status = 500
        route = "(unmatched)"
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise Problem("payload-too-large", f"the request body is over {limit} bytes")
            return message

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), rid]
            await send(message)

        length = _header(scope, b"content-length")
        try:
            if length is not None and length.isdigit() and int(length) > limit:
                route = "(too large)"
                await self._too_large(scope, sending, limit)
                return
            await self.app(scope, limited, sending)
        finally:
            if route != "(too large)":
                route = str(getattr(scope.get("route"), "path", route))
            seconds = time.monotonic() - start
            self.state.metrics.request(route, status, seconds)
            logs.access(record, str(scope.get("method", "")), str(scope.get("path", "")), status,
                        seconds)  # fmt: skip
            logs.end(token)

    @staticmethod
    async def _too_large(scope: Scope, send: Send, limit: int) -> None:
        problem = Problem("payload-too-large", f"the request body is over {limit} bytes")
        response = problem_response(problem, instance=str(scope.get("path", "")))
        await response(scope, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _allowed(request: Request) -> list[str]:
    """The methods some route of the app answers at ``request``'s path."""
    path = request.url.path
    methods: set[str] = set()
    for pattern, answered in request.app.state.veil_methods:
        if pattern.match(path):
            methods |= answered
    return sorted(methods)


def _methods(*routers: APIRouter) -> list[tuple[re.Pattern[str], set[str]]]:
    """Each route's path pattern and methods, from ``routers`` (the app's own and those it
    includes, whose routes carry their prefix)."""
    out = []
    for router in routers:
        for route in router.routes:
            pattern, methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
            if isinstance(pattern, re.Pattern) and methods:
                out.append((pattern, set(methods)))
    return out


_NUMBER_BRANCHES = ("float", "constrained-str")  # the two members of models.Num


def _field_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """pydantic's errors as ``{"loc", "msg"}`` members; the two failed branches of a number
    (a JSON number, an exact string) as one error naming the field and what it takes."""
    out: list[dict[str, Any]] = []
    merged: set[tuple[str, ...]] = set()
    for e in errors:
        loc = tuple(str(p) for p in e.get("loc", ()))
        if loc and loc[-1] in _NUMBER_BRANCHES:
            field = loc[:-1]
            if field in merged:
                continue
            merged.add(field)
            got = e.get("input")
            shown = json.dumps(got)[:40] if isinstance(got, bool | int | float | str) else None
            msg = (
                'must be a JSON number or an exact decimal or fraction string such as "0.1" '
                'or "1/3" (true, false and other strings are not numbers)'
            ) + (f"; got {shown}" if shown is not None else "")
            out.append({"loc": list(field), "msg": msg})
        else:
            out.append({"loc": list(loc), "msg": str(e.get("msg", ""))})
    return out


def _install_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        return problem_response(from_error(exc), instance=request.url.path)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        where = _field_errors(errors)
        first = where[0] if where else {"loc": [], "msg": "invalid request"}
        detail = f"{'.'.join(first['loc']) or 'request'}: {first['msg']}"
        problem = Problem("invalid-request", detail, {"errors": where})
        return problem_response(problem, instance=request.url.path)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        code = exc.status_code if isinstance(exc, StarletteHTTPException) else 500
        slug = {404: "not-found", 405: "method-not-allowed", 413: "payload-too-large"}.get(
            code, "invalid-request" if 400 <= code < 500 else "internal-error"
        )
        detail = {404: "no such resource", 405: "method not allowed here"}.get(
            code, "the request was refused"
        )
        headers = dict(exc.headers or {}) if isinstance(exc, StarletteHTTPException) else {}
        if code == 405:  # every method of the path (RFC 9110 §15.5.6), not only the first route's
            headers["Allow"] = ", ".join(_allowed(request))
        return problem_response(Problem(slug, detail, headers=headers), instance=request.url.path)

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(VeilError, on_problem)
    # the ledger's database failing below veil's own error (the principals', jobs' and
    # sessions' reads): its own handlers, so that it is answered (503) and done with — the
    # catch-all one below answers too, then lets the server drop the connection
    for database_error in DATABASE_ERRORS:
        app.add_exception_handler(database_error, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_problem)


def _declare_problem_schema(app: FastAPI) -> None:
    """Add the ``Problem`` schema (and what it refers to) to the app's OpenAPI components: the
    routes' error responses refer to it under ``application/problem+json``, a media type
    FastAPI's ``model=`` cannot give."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = generate()
            schema = ProblemModel.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(schema.pop("$defs", {}))
            schemas["Problem"] = schema
            # FastAPI's own 422 (on routes with parameters) says application/json and its
            # HTTPValidationError: the service answers it as every refusal, a problem document
            invalid = responses(422)[422]
            for operation in (op for ops in doc.get("paths", {}).values() for op in ops.values()):
                answer = operation.get("responses", {}).get("422", {})
                if "application/json" in answer.get("content", {}):
                    operation["responses"]["422"] = invalid
            if "HTTPValidationError" not in json.dumps(doc["paths"]):
                schemas.pop("HTTPValidationError", None)
                schemas.pop("ValidationError", None)
            apidoc.complete(doc)  # the bearer key, examples, exactly one of sql or plan
        return app.openapi_schema or {}

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(config: ServiceConfig) -> FastAPI:
    """The service over ``config``'s ledger; the config file's ``[[datasets]]`` are loaded into
    the catalog first (idempotently: every worker may do it)."""
    principals = Principals(config.ledger)
    # a repeated query's cache hit is recorded batched, shortly after: no write lock per hit;
    # the query threads' charges share durable transactions (group commit), each answer
    # still released only after its own charge is durable
    catalog = Catalog(Ledger(config.ledger, defer_cache_hits=True, group_commit=True))
    if config.path is not None:
        catalog.load_toml(config.path)
    state = ServiceState(
        config=config,
        catalog=catalog,
        principals=principals,
        jobs=JobStore(
            principals.engine, ttl_s=config.limits.job_ttl_s, keep_s=config.limits.job_keep_s
        ),
        limiter=RateLimiter(config.limits.rate_limit),
    )
    catalog.ledger.on_alert(state.metrics.alert)
    # the running sums checked against the charges now (a mismatch stops charging), then
    # periodically with stale reservations abandoned, while the app serves (veil.service.upkeep)
    upkeep = LedgerUpkeep(
        catalog.ledger,
        every_s=config.limits.ledger_check_s,
        reservation_ttl_s=config.limits.reservation_ttl_s,
        after=lambda ledger: state.metrics.charging_stopped(ledger.halted is not None),
    )
    upkeep.run_once()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        upkeep.start()
        yield
        upkeep.stop()
        state.close()

    app = FastAPI(
        title="veil",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=apidoc.operation_id,
    )
    app.state.veil = state
    app.state.veil_upkeep = upkeep
    _install_handlers(app)
    _declare_problem_schema(app)

    @app.get("/healthz", tags=["service"], summary="Liveness: 200 while the process serves",
             response_model=None, responses=ok(out.Health))  # fmt: skip
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/metrics",
        tags=["service"],
        summary="Prometheus text exposition of every worker (administrators only)",
        response_class=PlainTextResponse,
        responses=responses(401, 403, 429, 500, 503),
    )
    async def metrics(_who: Annotated[Principal, Depends(administrator)]) -> PlainTextResponse:
        text = await state.run(lambda: state.metrics.render(state.ledger))
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/problems", tags=["service"], summary="Every problem type the service answers with",
             response_model=None, responses=ok(out.ProblemTypes))  # fmt: skip
    async def problems() -> dict[str, Any]:
        return {
            "problems": [
                {"type": t.uri, "title": t.title, "status": t.status, "description": t.description}
                for t in PROBLEMS.values()
            ]
        }

    app.include_router(analyst.router)
    app.include_router(mechanism_api.router)
    app.include_router(admin.router)
    app.include_router(dashboard.router)
    routers = (app.router, analyst.router, mechanism_api.router, admin.router, dashboard.router)
    app.state.veil_methods = _methods(*routers)  # for 405's Allow
    app.add_middleware(HotQueries, state=state)  # inside Guard: its limits and metrics
    app.add_middleware(Guard, state=state)
    return app


def create_app_from_env() -> FastAPI:
    """The app of the config file named by ``$VEIL_SERVICE_CONFIG`` (uvicorn's factory)."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise InvalidArgumentError(
            f"set {CONFIG_ENV} to the service's config file (veil serve --config does it)"
        )
    return create_app(ServiceConfig.load(path))
