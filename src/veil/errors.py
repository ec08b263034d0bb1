"""The exception tree of veil.

Every error veil raises on purpose derives from :class:`VeilError`::

    VeilError
    ├── UserError                    the caller can fix it; the message says the rule,
    │   │                            the offending value and the fix
    │   ├── InvalidArgumentError     a bad parameter: ε ≤ 0, δ ∉ (0, 1), NaN data, a wrong dtype…
    │   ├── BoundsError              a summed column without bounds, or lower > upper
    │   ├── SchemaError              an unknown table or column, non-numeric data in a numeric
    │   │                            aggregate
    │   ├── UnsupportedQueryError    SQL outside veil's DP subset (carries the position)
    │   ├── BudgetExhaustedError     a charge larger than what remains (requested / remaining)
    │   ├── LedgerError              unknown analyst or dataset, malformed ledger URL…
    │   │   └── ReservationStateError  a reservation used against its lifecycle
    │   │                              (committed twice, refunded after commit…)
    │   ├── SessionStateError        a closed session used again
    │   ├── MissingDependencyError   an optional extra is not installed (says what to install)
    │   ├── AuthenticationError      a veil service refused the API key (missing, unknown,
    │   │                            revoked: 401) or wants an administrator's (403)
    │   └── RateLimitedError         a veil service's rate limit; ``retry_after`` seconds to wait
    ├── QueryFailedError             the engine failed after it began reading private data;
    │                                the charge stays and the message carries no engine text
    ├── RandomnessError              the operating system's CSPRNG failed; nothing is released
    ├── LedgerUnavailableError       the ledger's database failed (unreachable, disk full,
    │   │                            locked…) or charging is stopped; the call that raised it
    │   │                            charged nothing: retry later (``public``: words for an
    │   │                            analyst, without the database's URL or path)
    │   └── UnsettledChargeError     it failed after a charge was reserved, or while one was
    │                                being written: the charge may stand (``reservation``,
    │                                ``fingerprint`` say which, to look it up)
    ├── ServiceError                 a veil service could not be reached, or answered outside
    │   │                            its API (``veil.client``)
    │   ├── ServiceUnavailableError  nothing could be sent, or the service said it is
    │   │                            unavailable (503): retry later
    │   └── OutcomeUnknownError      a charging request may have reached the service but its
    │                                answer was lost; it was not sent again, and the message
    │                                says how to learn what happened
    └── InternalError                a broken invariant inside veil: this is a bug
        └── PrivacyInvariantError    the loss recomputed after compiling differs from the loss
                                     charged; nothing was released

User errors never leave the ledger changed; a refused query is not charged.

:class:`VeilWarning` (a ``UserWarning``) flags what is allowed but rarely wise — a per-query ε
above 10, a δ above 10⁻⁵, bounds for a column no aggregate reads. The CLI prints each as one
``warning: …`` line on stderr.

What a :class:`QueryFailedError` withholds from the analyst goes to the operator:
:func:`log_withheld` logs the engine's error, with its traceback, at ERROR level on the
``logging`` logger :data:`WITHHELD_LOGGER` (``"veil.withheld"``). The logger has a
``NullHandler``, so nothing is printed (not even by Python's last-resort handler, on the
analyst's stderr) until the person running veil configures logging.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veil.accounting.budget import Budget

__all__ = [
    "WITHHELD_LOGGER",
    "AuthenticationError",
    "BoundsError",
    "BudgetExhaustedError",
    "InternalError",
    "InvalidArgumentError",
    "LedgerError",
    "LedgerUnavailableError",
    "MissingDependencyError",
    "OutcomeUnknownError",
    "PrivacyInvariantError",
    "QueryFailedError",
    "RandomnessError",
    "RateLimitedError",
    "ReservationStateError",
    "SchemaError",
    "ServiceError",
    "ServiceUnavailableError",
    "SessionStateError",
    "UnknownDatasetError",
    "UnsettledChargeError",
    "UnsupportedQueryError",
    "UserError",
    "VeilError",
    "VeilWarning",
    "log_withheld",
]

WITHHELD_LOGGER = "veil.withheld"
"""The name of the logger that receives the engine errors withheld from analysts."""

_withheld = logging.getLogger(WITHHELD_LOGGER)
# Without a handler anywhere, Python's last-resort handler would print the withheld text on
# stderr, which may be the analyst's (a notebook, the CLI): the record only reaches handlers
# that the operator configured (on this logger, "veil" or the root logger).
_withheld.addHandler(logging.NullHandler())


class VeilError(Exception):
    """Root of every error veil raises on purpose."""


class VeilWarning(UserWarning):
    """Allowed, but rarely what the caller meant; the message says why and what to do."""


class UserError(VeilError):
    """The caller can fix this: the message names the value and the fix.

    ``cli`` is the same message with the fix in the ``veil`` command's syntax
    (``--bounds income=0:1000000`` rather than ``bounds={'income': (0, 1e6)}``), when the two
    differ; the CLI prints it instead of ``str(error)``.
    """

    def __init__(self, message: str, *, cli: str | None = None) -> None:
        super().__init__(message)
        self.cli = cli

    def for_cli(self) -> str:
        """The message as the command line should print it."""
        return self.cli if self.cli is not None else str(self)


class InvalidArgumentError(UserError, ValueError):
    """A parameter is out of its domain (ε ≤ 0, NaN data, an empty candidate list…)."""


class BoundsError(UserError, ValueError):
    """Bounds are missing for a summed column, or are not a finite interval lower ≤ upper."""


class SchemaError(UserError, LookupError):
    """An unknown table or column, or a column whose type does not fit the aggregate."""


class UnsupportedQueryError(UserError):
    """A query outside veil's DP subset.

    ``position`` is the 1-based (line, column) of the offending construct in the SQL text when
    known, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        position: tuple[int, int] | None = None,
        cli: str | None = None,
    ) -> None:
        if position is not None:
            where = f" (at line {position[0]}, column {position[1]})"
            message += where
            cli = None if cli is None else cli + where
        super().__init__(message, cli=cli)
        self.position = position


class BudgetExhaustedError(UserError):
    """A charge would exceed the remaining budget; nothing was charged."""

    def __init__(
        self,
        requested: Budget,
        remaining: Budget,
        *,
        analyst: str = "",
        dataset: str = "",
        scope: str = "",
    ) -> None:
        self.requested = requested
        self.remaining = remaining
        self.analyst = analyst
        self.dataset = dataset
        self.scope = scope  # "" for the analyst's own grant, else which cap ran out
        who = f" for analyst {analyst!r} on dataset {dataset!r}" if analyst or dataset else ""
        if scope:
            who += f" ({scope})"
        facts = (
            f"privacy budget exhausted{who}: requested {requested.precise()}, remaining "
            f"{remaining.precise()}, short by {requested.shortfall(remaining)}; "
        )
        super().__init__(
            facts + _advice(requested, remaining, cli=False),
            cli=facts + _advice(requested, remaining, cli=True),
        )


def _advice(requested: Budget, remaining: Budget, *, cli: bool) -> str:
    """What to do about a refusal: the part of the budget that ran out decides it; ``cli``:
    in the ``veil`` command's flags."""
    more = "ask an administrator to grant more" + (" (veil budget grant)" if cli else "")
    if requested.kind == "approx" and requested.delta > remaining.delta:
        keys = "list the keys (WHERE col IN ('a', 'b'))" if cli else "declare the keys' domain"
        delta = "a smaller --delta" if cli else "a smaller delta"
        return (
            "δ ran out (grouping by a column without declared keys spends δ on partition "
            f"selection): {keys} to spend none, ask for {delta}, or {more}"
        )
    cheaper = "a smaller --epsilon" if cli else "smaller epsilon"
    return f"{more}, or ask a cheaper query ({cheaper})"


class LedgerError(UserError):
    """The ledger cannot do what was asked (unknown analyst or dataset, a malformed URL…)."""


class UnknownDatasetError(LedgerError, LookupError):
    """No dataset of that name in the catalog (or none granted to the caller: the service
    answers both alike)."""


class ReservationStateError(LedgerError):
    """A reservation used against its lifecycle ``reserved → committed | refunded``."""


class SessionStateError(UserError):
    """A session used after it was closed."""


class MissingDependencyError(UserError, ImportError):
    """An optional dependency is missing; the message says which extra to install."""


class AuthenticationError(UserError):
    """A veil service refused the request's API key: none, unknown or revoked (HTTP 401), or
    the endpoint needs an administrator's key (403). ``status`` is the HTTP status."""

    def __init__(self, message: str, *, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(UserError):
    """A veil service's rate limit refused the request (HTTP 429) before doing anything: it
    may be sent again after ``retry_after`` seconds."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueryFailedError(VeilError):
    """The engine failed while it read private data. Whether (and why) it failed may depend on
    the data, so the reservation stays charged and the message quotes nothing the engine said."""


class RandomnessError(VeilError):
    """The operating system's random number generator failed; nothing was released."""


class LedgerUnavailableError(VeilError):
    """The ledger's database failed — unreachable, disk full, locked past the busy timeout,
    an I/O error — or charging was stopped (the ledger failed its integrity check). The call
    that raised it charged nothing; retry later. The message names the database for whoever
    runs veil; ``public`` says the same without it, for an analyst (the service's answer)."""

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or "the ledger's database is unavailable; nothing was charged"


class UnsettledChargeError(LedgerUnavailableError):
    """The ledger's database failed after a charge was reserved (its commit or refund could not
    be written) or while the reserve itself was being committed: the charge may stand, and no
    answer was released. ``reservation`` is the charge's id in the ledger (None when the
    database never said it), ``fingerprint`` the query's: look the charge up once the database
    is back — ``reserved`` or ``committed``: it stands; absent (or another fingerprint under
    that id): nothing was charged."""

    def __init__(
        self,
        message: str,
        *,
        reservation: int | None = None,
        fingerprint: str | None = None,
        public: str | None = None,
    ) -> None:
        super().__init__(
            message,
            public=public
            or "the ledger's database failed after this request's charge was reserved: the "
            "charge may stand and no answer was released",
        )
        self.reservation = reservation
        self.fingerprint = fingerprint


class ServiceError(VeilError):
    """A veil service could not be reached, or answered outside its API (a proxy's error page,
    a problem type this client does not know). ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServiceUnavailableError(ServiceError):
    """The request could not be sent (no connection), or the service answered that it is
    unavailable (HTTP 503: its ledger database or random source failed); retry later."""


class OutcomeUnknownError(ServiceError):
    """A request that may charge a budget (a query, a mechanism) may have reached the service,
    and its answer was lost (a read timeout, a dropped connection) or is not ready yet. The
    client never sends such a request again on its own — the service may have charged it — and
    the message says how to learn the outcome. ``job`` is the id of the job to wait for, when
    the service said the query runs as one; ``reservation`` and ``fingerprint`` identify the
    charge, when the service said which (its ledger failed after reserving it: look it up with
    ``Client.charge``)."""

    def __init__(
        self,
        message: str,
        *,
        job: str | None = None,
        reservation: int | None = None,
        fingerprint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.job = job
        self.reservation = reservation
        self.fingerprint = fingerprint


class InternalError(VeilError):
    """A broken invariant inside veil. This is a bug: please report it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{message} (this is a bug in veil; please report it)")


class PrivacyInvariantError(InternalError):
    """The privacy loss recomputed from the built mechanisms differs from the charge."""


def log_withheld(
    error: BaseException,
    *,
    analyst: str | None,
    dataset: str | None,
    query: str,
    reservation: int | None = None,
) -> None:
    """Log for the operator the error that a :class:`QueryFailedError` withholds.

    Call it where the engine's ``error`` is caught after the charge was reserved, before
    raising the generic :class:`QueryFailedError` (which must not chain ``error``). The record
    goes to the logger :data:`WITHHELD_LOGGER` at ERROR level, with ``error``'s traceback; its
    message names the analyst, the dataset, the ledger's reservation id and ``query`` (the text
    the ledger records with the charge), and quotes ``error``. The same fields are on the
    record as ``veil_analyst``, ``veil_dataset``, ``veil_query`` and ``veil_reservation``, for
    structured handlers. Never show this log to the analyst: the engine's text can quote a
    private value.
    """
    _withheld.error(
        "withheld from analyst %r: %s on dataset %r failed after reserving (reservation %s): "
        "%s: %s",
        analyst,
        query,
        dataset,
        reservation,
        type(error).__name__,
        error,
        exc_info=(type(error), error, error.__traceback__),
        extra={
            "veil_analyst": analyst,
            "veil_dataset": dataset,
            "veil_query": query,
            "veil_reservation": reservation,
        },
    )
