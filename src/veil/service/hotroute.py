"""A repeated query answered before FastAPI's routing: the service's fastest path.

A worker that has shown a cached answer keeps its body (:mod:`veil.service.hot`). When the same
request comes again, what FastAPI does for it — routing, dependency resolution, validating the
JSON body into a model, building the response — costs more than the answer's own work (two
local ledger reads and a queued cache-hit record). :class:`HotQueries` is an ASGI layer in front
of FastAPI that recognises such a request and answers it with the same checks, in the same
order, through the same functions (:func:`veil.service.analyst.check_hot`): the same status,
the same body, the same headers, the same timing padding.

It takes a request only when all of these hold, and otherwise hands it to FastAPI untouched
(its body replayed): ``POST /v1/query`` with no query string, a JSON content type, a declared
length within the request size limit, a bearer key, a body that validates as a
:class:`~veil.service.models.QueryRequest`, the ledger's reads local, and a kept answer for that
body. A problem raised by the checks (401, 429, 404, 413) is answered here as FastAPI's handler
would answer it; when the kept answer is no longer good, the request goes on to FastAPI with the
checks' result in its scope, so the key is checked (and its rate counted) once.
"""

from __future__ import annotations

from types import SimpleNamespace

from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veil.service import analyst
from veil.service.models import QueryRequest
from veil.service.problems import from_error, problem_response
from veil.service.state import ServiceState, arrival, bearer

__all__ = ["HotQueries"]

PATH = "/v1/query"
_ROUTE = SimpleNamespace(path=PATH)  # what the metrics read of a request's route


class HotQueries:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    def _candidate(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            return False
        if scope.get("query_string") or not self.state.ledger_reads_are_local:
            return False
        length, json = None, False
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                json = value.split(b";", 1)[0].strip().lower() == b"application/json"
        limit = self.state.config.limits.max_request_bytes
        return json and length is not None and length.isdigit() and int(length) <= limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._candidate(scope):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        raw = b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # a disconnect: FastAPI sees it as it would have
            raw += message.get("body", b"")
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        whole = messages[-1]["type"] == "http.request"
        if not (whole and await self._answer(scope, raw, send)):
            await self.app(scope, replay, send)

    async def _answer(self, scope: Scope, raw: bytes, send: Send) -> bool:
        """Answer the request here (True), or leave it to FastAPI (False)."""
        state = self.state
        request = Request(scope)
        key = bearer(request)
        if key is None:
            return False
        try:
            body = QueryRequest.model_validate_json(raw)
        except ValidationError:
            return False
        if not state.hot.holds(body):
            return False
        start = arrival(request)
        try:
            hot = analyst.check_hot(state, request, key, body)
        except Exception as exc:
            scope["route"] = _ROUTE
            await problem_response(from_error(exc), instance=PATH)(scope, _no_body, send)
            return True
        if hot.again is None:
            scope[analyst.HOT_CHECKED] = hot
            return False
        scope["route"] = _ROUTE
        await analyst.pad_until(start + hot.ds.min_response_ms / 1000)
        await analyst.respond(hot.again)(scope, _no_body, send)
        return True


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}
