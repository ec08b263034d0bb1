"""veil — differential-privacy analytics with exact noise and durable budgets.

The package imports its light parts (the errors, :class:`Budget`) at once and everything else —
the engines, the ledger, the mechanisms — on first use (PEP 562), so that ``veil --help`` and
``import veil`` do not pay for DuckDB, SQLAlchemy or sqlglot.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget
from veil.errors import (
    AuthenticationError,
    BoundsError,
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    LedgerError,
    LedgerUnavailableError,
    MissingDependencyError,
    OutcomeUnknownError,
    PrivacyInvariantError,
    QueryFailedError,
    RandomnessError,
    RateLimitedError,
    ReservationStateError,
    SchemaError,
    ServiceError,
    ServiceUnavailableError,
    SessionStateError,
    UnknownDatasetError,
    UnsettledChargeError,
    UnsupportedQueryError,
    UserError,
    VeilError,
    VeilWarning,
)

if TYPE_CHECKING:
    from veil import noise as noise  # public submodules
    from veil import postprocess as postprocess
    from veil import sensitivity as sensitivity
    from veil.accounting.ledger import Ledger
    from veil.catalog import Catalog
    from veil.local.perturb import perturb
    from veil.mechanisms import GaussianMechanism, LaplaceMechanism
    from veil.release.result import Result
    from veil.session import Session

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "BoundsError",
    "Budget",
    "BudgetExhaustedError",
    "Catalog",
    "GaussianMechanism",
    "InternalError",
    "InvalidArgumentError",
    "LaplaceMechanism",
    "Ledger",
    "LedgerError",
    "LedgerUnavailableError",
    "MissingDependencyError",
    "OutcomeUnknownError",
    "PrivacyInvariantError",
    "QueryFailedError",
    "RandomnessError",
    "RateLimitedError",
    "ReservationStateError",
    "Result",
    "SchemaError",
    "ServiceError",
    "ServiceUnavailableError",
    "Session",
    "SessionStateError",
    "UnknownDatasetError",
    "UnsettledChargeError",
    "UnsupportedQueryError",
    "UserError",
    "VeilError",
    "VeilWarning",
    "__version__",
    "perturb",
]

_SUBMODULES = ("noise", "postprocess", "sensitivity")
_LAZY = {
    "Catalog": "veil.catalog",
    "GaussianMechanism": "veil.mechanisms",
    "LaplaceMechanism": "veil.mechanisms",
    "Ledger": "veil.accounting.ledger",
    "Result": "veil.release.result",
    "Session": "veil.session",
    "perturb": "veil.local.perturb",
}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f"veil.{name}")
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    loaded = {n for n, v in globals().items() if type(v).__name__ == "module"}
    return sorted(set(__all__) | set(_SUBMODULES) | loaded)
