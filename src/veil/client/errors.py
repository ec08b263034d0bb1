"""Problem documents (RFC 9457) as the library's exceptions, for ``veil.client``: chosen by
the problem's ``type`` URN (never by its words) and worded as the service worded them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from veil.client.answers import budget_from_json
from veil.errors import (
    AuthenticationError,
    BoundsError,
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    OutcomeUnknownError,
    QueryFailedError,
    RateLimitedError,
    SchemaError,
    ServiceError,
    ServiceUnavailableError,
    UnknownDatasetError,
    UnsupportedQueryError,
    UserError,
    VeilError,
)

__all__ = ["ERRORS", "URN", "Asked", "problem_error", "unknown_dataset"]

URN = "urn:veil:problem:"

ERRORS: Mapping[str, type[VeilError]] = {
    "unauthorized": AuthenticationError,
    "forbidden": AuthenticationError,
    "not-found": UnknownDatasetError,
    "method-not-allowed": ServiceError,
    "invalid-request": InvalidArgumentError,
    "invalid-argument": InvalidArgumentError,
    "bounds": BoundsError,
    "schema": SchemaError,
    "unsupported-query": UnsupportedQueryError,
    "budget-exhausted": BudgetExhaustedError,
    "payload-too-large": InvalidArgumentError,
    "rate-limited": RateLimitedError,
    "query-failed": QueryFailedError,
    "internal-error": InternalError,
    "unavailable": ServiceUnavailableError,
    "outcome-unknown": OutcomeUnknownError,
}
"""The exception each problem type (the slug of its ``type`` URN) becomes. A ``not-found``
is an :class:`~veil.errors.UnknownDatasetError` when a dataset was named, an
:class:`~veil.errors.InvalidArgumentError` for a job (a wrong id), else a
:class:`~veil.errors.ServiceError` (a wrong URL)."""


@dataclass(frozen=True)
class Asked:
    """What a request was about, to word its errors."""

    dataset: str | None = None
    job: str | None = None


def _words(error: VeilError, detail: str) -> VeilError:
    """``error`` worded as the service worded it (its ``str`` is the service's detail)."""
    error.args = (detail,)
    if isinstance(error, UserError):
        error.cli = None
    return error


def unknown_dataset(dataset: str) -> UnknownDatasetError:
    return UnknownDatasetError(
        f"no dataset {dataset!r} that you may use on this service (one that does not exist and "
        "one not granted to you answer alike); an administrator grants budgets: veil budget "
        "grant"
    )


def _unknown_outcome(body: Mapping[str, object], detail: str) -> OutcomeUnknownError:
    """The service's ``outcome-unknown``: its ledger failed after reserving the charge."""
    reservation = body.get("reservation")
    fingerprint = body.get("fingerprint")
    charge = (
        reservation if isinstance(reservation, int) and not isinstance(reservation, bool) else None
    )
    mark = fingerprint if isinstance(fingerprint, str) else None
    how = (
        f"client.charge({charge}"
        + (f", fingerprint={mark!r}" if mark is not None else "")
        + ") says what became of it once the service answers again"
        if charge is not None
        else "find the query among the charges of client.history(dataset) once the service "
        "answers again"
    )
    return OutcomeUnknownError(
        f"{detail}. The client does not send it again: {how} — 'committed': send the identical "
        "query again, answered from the cache at no cost; 'reserved': still running (it becomes "
        "'abandoned' if its worker is gone); 'abandoned': charged, nothing was released; "
        "None (no such charge): nothing was charged",
        reservation=charge,
        fingerprint=mark,
    )


def _retry_after(headers: Mapping[str, str]) -> float:
    try:
        return max(0.0, float(headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def problem_error(
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
    asked: Asked | None = None,
) -> VeilError:
    """The veil exception of an error answer (a problem document, or anything else)."""
    asked = asked or Asked()
    headers = headers or {}
    kind = body.get("type") if isinstance(body, Mapping) else None
    if not isinstance(body, Mapping) or not isinstance(kind, str) or not kind.startswith(URN):
        text = json.dumps(body)[:300] if body is not None else "no body"
        return ServiceError(
            f"the service answered HTTP {status} without a veil problem document ({text}); "
            "is the URL that of a veil service, and is its proxy up?",
            status=status,
        )
    slug = kind.removeprefix(URN)
    detail = str(body.get("detail", ""))
    match slug:
        case "unauthorized" | "forbidden":
            return AuthenticationError(detail, status=status)
        case "not-found" if asked.job is not None:
            return InvalidArgumentError(
                f"no job {asked.job!r} of yours on this service (a job is visible to the key "
                "that started it only)"
            )
        case "not-found" if asked.dataset is not None:
            return unknown_dataset(asked.dataset)
        case "invalid-request":
            where = "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                for e in body.get("errors") or ()
                if isinstance(e, Mapping)
            )
            return InvalidArgumentError(f"{detail} ({where})" if where else detail)
        case "unsupported-query":
            line, column = body.get("line"), body.get("column")
            error = UnsupportedQueryError(detail)
            if isinstance(line, int) and isinstance(column, int):
                error.position = (line, column)
            return error
        case "budget-exhausted":
            try:
                requested = budget_from_json(body["requested"])
                remaining = budget_from_json(body["remaining"])
            except (KeyError, InvalidArgumentError, ServiceError):
                return ServiceError(f"a budget-exhausted problem without budgets: {detail}")
            exhausted = BudgetExhaustedError(requested, remaining, dataset=asked.dataset or "")
            return _words(exhausted, detail)
        case "rate-limited":
            return RateLimitedError(detail, retry_after=_retry_after(headers))
        case "internal-error":
            return InternalError(f"the service failed: {detail}")
        case "unavailable":
            return ServiceUnavailableError(detail, status=status)
        case "outcome-unknown":
            return _unknown_outcome(body, detail)
        case "method-not-allowed" | "not-found":
            return ServiceError(detail, status=status)
    known = ERRORS.get(slug)
    if known is None:
        return ServiceError(f"{kind} (HTTP {status}): {detail}", status=status)
    return known(detail)
