"""Privacy losses, their composition and conversions, and the persistent ledger."""

from __future__ import annotations

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
from veil.accounting.ledger import Ledger, Reservation
from veil.accounting.records import Alert, Record
from veil.accounting.spending import Spent

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
