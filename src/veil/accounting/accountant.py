"""An in-memory accountant: the seeds' ``PrivacyLedger`` done exactly.

It applies the same rule as the persistent :class:`~veil.accounting.Ledger`
(:mod:`veil.accounting.spending`) to a budget that lives in one process — for a script, a test,
or to plan a batch of queries before reserving it in the ledger.

>>> acct = Accountant(Budget(epsilon=1))
>>> for _ in range(10):
...     acct.charge(Budget(epsilon=0.1))
>>> acct.remaining
Budget(epsilon=0)
"""

from __future__ import annotations

import threading

from veil.accounting import spending
from veil.accounting.budget import Budget, Number
from veil.accounting.composition import Composition, compose
from veil.accounting.spending import Spent
from veil.errors import BudgetExhaustedError, InvalidArgumentError

__all__ = ["Accountant"]


class Accountant:
    """A budget and the losses charged to it, in memory; thread-safe."""

    def __init__(self, total: Budget) -> None:
        if not isinstance(total, Budget):
            raise InvalidArgumentError(f"total must be a veil.Budget, got {total!r}")
        self.total = total
        self._spent = Spent()
        self._charges: list[Budget] = []
        self._lock = threading.Lock()

    def charge(self, loss: Budget) -> None:
        """Charge ``loss`` or raise ``BudgetExhaustedError`` (nothing charged)."""
        if not isinstance(loss, Budget):
            raise InvalidArgumentError(f"loss must be a veil.Budget, got {loss!r}")
        with self._lock:
            after = spending.add_charge(self.total, self._spent, loss)
            if not spending.fits(self.total, after):
                raise BudgetExhaustedError(loss, spending.remaining(self.total, self._spent))
            self._spent = after
            self._charges.append(loss)

    @property
    def spent(self) -> Spent:
        """The exact running sums."""
        return self._spent

    @property
    def remaining(self) -> Budget:
        """What may still be charged."""
        return spending.remaining(self.total, self._spent)

    @property
    def charges(self) -> tuple[Budget, ...]:
        """Every loss charged, in order."""
        return tuple(self._charges)

    def guarantee(self, *, delta: Number | None = None) -> Composition:
        """The tightest valid statement of the total loss of the charges so far, if they were
        fixed in advance (see :func:`~veil.accounting.compose`)."""
        return compose(self._charges, delta=delta)
