"""Privacy losses, their composition and conversions, and the persistent ledger.

The ledger's classes load on first use (SQLAlchemy is not needed to do budget arithmetic), so
``import veil.accounting`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from veil.accounting.accountant import Accountant
from veil.accounting.allocation import (
    even_split,
    fraction_of_remaining,
    fraction_of_total,
    split_budget,
)
from veil.accounting.budget import Budget, exact
from veil.accounting.composition import (
    Composition,
    advanced_composition,
    compose,
    optimal_composition,
    parallel,
    sequential,
)
from veil.accounting.conversions import zcdp_to_approx
from veil.accounting.spending import Spent

if TYPE_CHECKING:  # the ledger (SQLAlchemy) is imported on first use, not with the package
    from veil.accounting.ledger import Ledger, Reservation
    from veil.accounting.records import Alert, Record

_LAZY = {
    "Ledger": "veil.accounting.ledger",
    "Reservation": "veil.accounting.ledger",
    "Alert": "veil.accounting.records",
    "Record": "veil.accounting.records",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Accountant",
    "Alert",
    "Budget",
    "Composition",
    "Ledger",
    "Record",
    "Reservation",
    "Spent",
    "advanced_composition",
    "compose",
    "even_split",
    "exact",
    "fraction_of_remaining",
    "fraction_of_total",
    "optimal_composition",
    "parallel",
    "sequential",
    "split_budget",
    "zcdp_to_approx",
]
