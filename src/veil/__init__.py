"""veil — differential-privacy analytics with exact noise and durable budgets."""

from veil import mechanisms as mechanisms  # public submodules
from veil import noise as noise
from veil import postprocess as postprocess
from veil import sensitivity as sensitivity
from veil.accounting import Budget, Ledger
from veil.errors import (
    BoundsError,
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    LedgerError,
    MissingDependencyError,
    PrivacyInvariantError,
    QueryFailedError,
    RandomnessError,
    ReservationStateError,
    SchemaError,
    SessionStateError,
    UnsupportedQueryError,
    UserError,
    VeilError,
    VeilWarning,
)
from veil.mechanisms import GaussianMechanism, LaplaceMechanism
from veil.perturb import perturb
from veil.release.result import Result
from veil.session import Session

__version__ = "0.1.0"

__all__ = [
    "BoundsError",
    "Budget",
    "BudgetExhaustedError",
    "GaussianMechanism",
    "InternalError",
    "InvalidArgumentError",
    "LaplaceMechanism",
    "Ledger",
    "LedgerError",
    "MissingDependencyError",
    "PrivacyInvariantError",
    "QueryFailedError",
    "RandomnessError",
    "ReservationStateError",
    "Result",
    "SchemaError",
    "Session",
    "SessionStateError",
    "UnsupportedQueryError",
    "UserError",
    "VeilError",
    "VeilWarning",
    "__version__",
    "perturb",
]
