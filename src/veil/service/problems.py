"""Errors as RFC 9457 problem documents (``application/problem+json``).

Every refusal the service gives is a problem document with a stable ``type`` (a URN,
``urn:veil:problem:<slug>``), a ``title`` that names the type, a ``status``, a ``detail`` in
words and, for some types, extension members (``requested`` / ``remaining`` for an exhausted
budget, ``line`` / ``column`` for an unsupported query). The types are listed in
:data:`PROBLEMS` and served at ``GET /problems``.

What a veil error says is released to the analyst (DESIGN §1): the session already words user
errors from public inputs only, and :class:`veil.errors.QueryFailedError` carries nothing the
engine said. An unexpected exception becomes ``internal-error`` with a fixed detail; its text
goes to the operator's log (:func:`veil.errors.log_withheld`), never to the caller.

**The ledger's database failing** is ``unavailable`` (503: nothing was charged, retry later) —
whatever the database said, which goes to the operator's log (logger ``veil.service``) and
never into the detail (it names the database's URL or path). A failure *after* the request's
charge was reserved — the database failing as it commits or refunds the charge, or anything
failing after a reservation (``reserved``) — is ``outcome-unknown`` instead: the charge may
stand, so the client must not be told to retry; ``reservation`` and ``fingerprint`` name it,
for ``GET /v1/charges/{reservation}``. A committed charge is never answered with a 503.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import JSONResponse

from veil.cli_options import budget_json
from veil.errors import (
    BoundsError,
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    LedgerError,
    LedgerUnavailableError,
    MissingDependencyError,
    QueryFailedError,
    RandomnessError,
    ReservationStateError,
    SchemaError,
    SessionStateError,
    UnknownDatasetError,
    UnsettledChargeError,
    UnsupportedQueryError,
    UserError,
    VeilError,
)
from veil.service import logs

if TYPE_CHECKING:
    from veil.accounting.reservation import Reservation

__all__ = [
    "DATABASE_ERRORS",
    "PROBLEMS",
    "Problem",
    "ProblemType",
    "from_error",
    "problem_response",
    "responses",
]

logger = logging.getLogger("veil.service")

MEDIA_TYPE = "application/problem+json"


@dataclass(frozen=True)
class ProblemType:
    """One kind of problem: its slug (the end of its ``type`` URN), title and status."""

    slug: str
    title: str
    status: int
    description: str

    @property
    def uri(self) -> str:
        return f"urn:veil:problem:{self.slug}"


_TYPES = (
    ProblemType("unauthorized", "Missing or invalid API key", 401,
                "No `Authorization: Bearer <key>` header, or a key that is unknown or revoked."),
    ProblemType("forbidden", "Administrators only", 403,
                "The endpoint needs an administrator's key."),
    ProblemType("not-found", "Not found", 404,
                "No such resource. A dataset that exists but is not granted to the caller "
                "answers exactly the same, so that dataset names cannot be enumerated."),
    ProblemType("method-not-allowed", "Method not allowed", 405,
                "The path exists but not with this HTTP method."),
    ProblemType("invalid-request", "Invalid request", 422,
                "The request body or parameters do not match the schema (`errors` lists "
                "where)."),
    ProblemType("invalid-argument", "Invalid argument", 400,
                "A parameter is out of its domain, or asks to widen what the data owner set "
                "(higher contribution limits, a larger ε than one query may spend). Nothing "
                "was charged."),
    ProblemType("bounds", "Invalid bounds", 400,
                "A summed column without bounds, bounds that widen the owner's, or lower > "
                "upper. Nothing was charged."),
    ProblemType("schema", "Unknown table or column", 400,
                "An unknown table or column, or a column whose type does not fit the "
                "aggregate. Nothing was charged."),
    ProblemType("unsupported-query", "Query outside veil's SQL subset", 400,
                "The SQL is outside veil's differentially private subset; `line` and "
                "`column` give the offending construct's position when known. Nothing was "
                "charged."),
    ProblemType("budget-exhausted", "Privacy budget exhausted", 403,
                "The query costs more than what remains; `requested` and `remaining` say how "
                "much. Nothing was charged."),
    ProblemType("payload-too-large", "Request too large", 413,
                "The request body or the SQL text is longer than the service accepts."),
    ProblemType("rate-limited", "Too many requests", 429,
                "Past the per-principal rate limit; retry after `Retry-After` seconds."),
    ProblemType("query-failed", "Query failed after reading the data", 500,
                "The engine failed after it began reading private data: the charge stays and "
                "the engine's message is withheld (it could depend on the data)."),
    ProblemType("internal-error", "Internal error", 500,
                "A bug in veil. Nothing about the data is said; the operator's log has the "
                "details."),
    ProblemType("unavailable", "Service unavailable", 503,
                "The ledger database or the random number generator is unavailable, or "
                "charging is stopped until an operator checks the ledger. Nothing was "
                "charged; retry later."),
    ProblemType("outcome-unknown", "Outcome unknown: the charge may stand", 500,
                "The service failed after this request's charge was reserved (the ledger's "
                "database failed as the charge was written, say): the charge may stand and no "
                "answer was released. Do not send the request again; look the charge up with "
                "`GET /v1/charges/{reservation}` once the service answers again "
                "(`reservation`, `fingerprint`; `reservation` is null when the database never "
                "said it). `committed`: send the identical query again, answered from the "
                "cache at no cost; `reserved`: still running, or resolved as `abandoned` "
                "after the service's `reservation_ttl_s`; `abandoned`: charged, nothing was "
                "released; no such charge: nothing was charged."),
)  # fmt: skip

PROBLEMS: Mapping[str, ProblemType] = {t.slug: t for t in _TYPES}


class Problem(Exception):
    """A problem to answer with: its type (a slug of :data:`PROBLEMS`), a detail in words,
    extension members and response headers."""

    def __init__(
        self,
        slug: str,
        detail: str,
        extensions: Mapping[str, Any] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(slug, detail)
        if slug not in PROBLEMS:
            raise InternalError(f"unknown problem type {slug!r}")
        self.slug = slug
        self.detail = detail
        self.extensions = dict(extensions or {})
        self.headers = dict(headers or {})

    @property
    def type(self) -> ProblemType:
        return PROBLEMS[self.slug]

    def body(self, instance: str | None = None) -> dict[str, Any]:
        t = self.type
        out: dict[str, Any] = {
            "type": t.uri,
            "title": t.title,
            "status": t.status,
            "detail": self.detail,
        }
        if instance is not None:
            out["instance"] = instance
        out.update(self.extensions or {})
        return out


PROBLEM_SCHEMA_REF = "#/components/schemas/Problem"

_HEADERS: Mapping[int, Mapping[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "the scheme to authenticate with",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "whole seconds until a request may be answered",
            "required": True,
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        }
    },
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of error ``statuses`` (for a route decorator's
    ``responses=``): each a problem document (the ``Problem`` schema the app's document
    declares), described by the problem types answered with that status."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted(set(statuses)):
        titles = [t.title for t in _TYPES if t.status == status]
        if not titles:
            raise InternalError(f"no problem type answers with {status}")
        entry: dict[str, Any] = {
            "description": f"{' or '.join(titles)} (problem document)",
            "content": {MEDIA_TYPE: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}},
        }
        if status in _HEADERS:
            entry["headers"] = dict(_HEADERS[status])
        out[status] = entry
    return out


def problem_response(problem: Problem, instance: str | None = None) -> JSONResponse:
    """The HTTP response of ``problem`` (its slug the request's logged outcome)."""
    logs.note(outcome=problem.slug)
    headers = dict(problem.headers or {})
    if problem.slug == "unauthorized":
        headers.setdefault("WWW-Authenticate", 'Bearer realm="veil"')
    return JSONResponse(
        problem.body(instance),
        status_code=problem.type.status,
        media_type=MEDIA_TYPE,
        headers=headers,
    )


_INTERNAL_DETAIL = (
    "an internal error occurred (a bug in veil); nothing about the data is said here, and the "
    "operator's log has the details"
)


def _database_errors() -> tuple[type[Exception], ...]:
    """SQLAlchemy's and its drivers' errors; psycopg's only where the ``postgres`` extra is in."""
    errors: tuple[type[Exception], ...] = (SQLAlchemyError, sqlite3.Error)
    try:  # the PostgreSQL driver is an extra: imported here, never at module level
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is installed with the service's tests
        return errors
    return (*errors, psycopg.Error)


DATABASE_ERRORS: tuple[type[Exception], ...] = _database_errors()
"""The errors of the ledger's database itself (SQLAlchemy's and its drivers'): 503."""


def unknown_outcome(reservation: int | None, fingerprint: str | None, detail: str) -> Problem:
    """The ``outcome-unknown`` problem of a charge that may stand."""
    where = f" (reservation {reservation})" if reservation is not None else ""
    return Problem(
        "outcome-unknown",
        f"{detail}{where}; do not send the request again: look the charge up with GET "
        "/v1/charges/{reservation} once the service answers again",
        {"reservation": reservation, "fingerprint": fingerprint},
    )


def from_error(error: BaseException, reserved: Sequence[Reservation] = ()) -> Problem:
    """The problem that answers ``error`` (a veil error, or anything unexpected); ``reserved``:
    the charges the request reserved before it failed (its answer must then not say "retry":
    an outage or a bug after one that was not refunded is ``outcome-unknown``; a user error
    stays itself — the session refunds before raising one)."""
    if isinstance(error, Problem):
        return error
    if isinstance(error, UnsettledChargeError):
        logger.error("the charge's outcome is unknown: %s", error)
        return unknown_outcome(error.reservation, error.fingerprint, error.public)
    standing = [r for r in reserved if r.status != "refunded"]
    if standing and (
        not isinstance(error, UserError | QueryFailedError)
        or isinstance(error, MissingDependencyError)
    ):
        last = standing[-1]
        logger.error(
            "failed after reserving %s: %s", last, error, exc_info=(type(error), error,
                                                                    error.__traceback__)
        )  # fmt: skip
        return unknown_outcome(
            last.id,
            last.fingerprint,
            "the service failed after this request's charge was reserved: the charge may "
            "stand and no answer was released",
        )
    if isinstance(error, LedgerUnavailableError):
        logger.error("ledger unavailable, answered as 503: %s", error)
        return Problem("unavailable", f"{error.public}; retry later")
    if isinstance(error, DATABASE_ERRORS):
        # the database failed: its text names the database, so it goes to the operator only
        logger.error("ledger database error answered as 503: %s: %s", type(error).__name__, error)
        return Problem("unavailable", "the ledger's database is unavailable; retry later")
    if isinstance(error, BudgetExhaustedError):
        return Problem(
            "budget-exhausted",
            str(error),
            {
                "requested": budget_json(error.requested),
                "remaining": budget_json(error.remaining),
            },
        )
    if isinstance(error, UnsupportedQueryError):
        ext: dict[str, Any] = {}
        if error.position is not None:
            ext = {"line": error.position[0], "column": error.position[1]}
        return Problem("unsupported-query", str(error), ext)
    if isinstance(error, BoundsError):
        return Problem("bounds", str(error))
    if isinstance(error, UnknownDatasetError):
        return Problem("not-found", "no such dataset")
    if isinstance(error, SchemaError):
        return Problem("schema", str(error))
    if isinstance(error, LedgerError) and isinstance(error.__cause__, DATABASE_ERRORS):
        # the database failed: its text names the database, so it goes to the operator only
        logger.error("ledger error answered as 503: %s", error)
        return Problem("unavailable", "the ledger is unavailable; retry later")
    if isinstance(error, ReservationStateError):  # a late commit of an abandoned charge
        return Problem("query-failed", str(error))
    if isinstance(error, MissingDependencyError):
        logger.error("missing dependency: %s", error)
        return Problem("unavailable", "the service lacks a component it needs; tell the operator")
    if isinstance(error, InvalidArgumentError | SessionStateError | UserError):
        return Problem("invalid-argument", str(error))
    if isinstance(error, QueryFailedError):
        return Problem("query-failed", str(error))
    if isinstance(error, RandomnessError):
        logger.error("randomness failure: %s", error)
        return Problem("unavailable", "the random number generator failed; nothing was released")
    if isinstance(error, InternalError | VeilError):
        logger.error("internal error", exc_info=(type(error), error, error.__traceback__))
        return Problem("internal-error", _INTERNAL_DETAIL)
    logger.error(
        "unexpected %s", type(error).__name__, exc_info=(type(error), error, error.__traceback__)
    )
    return Problem("internal-error", _INTERNAL_DETAIL)
