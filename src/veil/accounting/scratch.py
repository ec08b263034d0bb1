"""A ledger that keeps nothing: for one-shot work in one process (``veil query`` without
``--ledger``).

:class:`ScratchLedger` follows the :class:`veil.Ledger` protocol — grants, an atomic
check-and-spend ``reserve``, reservations that go ``reserved → committed | refunded`` once —
with the same exact budget arithmetic (:mod:`veil.accounting.spending`) and the same
:class:`veil.accounting.reservation.Reservation`, but in a dict under a
lock instead of a database: no SQLAlchemy to import, no history, no cache (a one-shot budget is
spent by its one query), no alerts. It is never persistent, so a caller-supplied random source
is allowed with it, as with an in-memory :class:`veil.Ledger`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

from veil.accounting import spending
from veil.accounting.budget import Budget
from veil.accounting.reservation import Reservation, check_reserved
from veil.errors import BudgetExhaustedError, LedgerError

__all__ = ["ScratchLedger"]


class ScratchLedger:
    """An in-process ledger that keeps nothing (see the module docstring)."""

    persistent = False
    url = "scratch ledger (in memory, nothing kept)"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._grants: dict[tuple[str, str], tuple[Budget, spending.Spent]] = {}
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return "ScratchLedger()"

    def close(self) -> None:
        """Nothing to release."""

    def _row(self, analyst: str, dataset: str) -> tuple[Budget, spending.Spent]:
        try:
            return self._grants[(analyst, dataset)]
        except KeyError:
            raise LedgerError(
                f"analyst {analyst!r} has no budget on dataset {dataset!r} in this scratch "
                "ledger; grant one first"
            ) from None

    def _add(self, analyst: str, dataset: str, loss: Budget, sign: int) -> None:
        total, spent = self._row(analyst, dataset)
        change = spending.add_charge if sign > 0 else spending.remove_charge
        self._grants[(analyst, dataset)] = (total, change(total, spent, loss))

    def grant(
        self,
        analyst: str,
        dataset: str,
        budget: Budget,
        *,
        alert_thresholds: Sequence[Any] | None = None,
    ) -> Budget:
        """Grant ``budget`` (added to an existing grant of the same kind); the new total."""
        with self._lock:
            found = self._grants.get((analyst, dataset))
            if found is None:
                self._grants[(analyst, dataset)] = (budget, spending.Spent())
                return budget
            total, spent = found
            if (total.kind == "zcdp") != (budget.kind == "zcdp"):
                raise LedgerError(
                    f"a {budget.kind} grant ({budget}) cannot be added to a {total.kind} one"
                )
            self._grants[(analyst, dataset)] = (total + budget, spent)
            return total + budget

    def has_grant(self, analyst: str, dataset: str) -> bool:
        with self._lock:
            return (analyst, dataset) in self._grants

    def granted(self, analyst: str, dataset: str) -> Budget:
        with self._lock:
            return self._row(analyst, dataset)[0]

    def remaining(self, analyst: str, dataset: str) -> Budget:
        with self._lock:
            return spending.remaining(*self._row(analyst, dataset))

    def used_share(self, analyst: str, dataset: str) -> Fraction:
        with self._lock:
            return spending.used_fraction(*self._row(analyst, dataset))

    def covers(self, analyst: str, dataset: str, loss: Budget) -> bool:
        with self._lock:
            total, spent = self._row(analyst, dataset)
            try:
                return spending.fits(total, spending.add_charge(total, spent, loss))
            except LedgerError:
                return False

    def reserve(
        self,
        analyst: str,
        dataset: str,
        loss: Budget,
        *,
        fingerprint: str,
        data_version: str = "",
        query: str | None = None,
    ) -> Reservation:
        """Atomically check that ``loss`` fits and charge it (``BudgetExhaustedError`` and
        nothing charged when it does not)."""
        with self._lock:
            total, spent = self._row(analyst, dataset)
            after = spending.add_charge(total, spent, loss)
            if not spending.fits(total, after):
                raise BudgetExhaustedError(
                    loss, spending.remaining(total, spent), analyst=analyst, dataset=dataset
                )
            self._grants[(analyst, dataset)] = (total, after)
            return Reservation(
                self, next(self._ids), analyst, dataset, loss, fingerprint, data_version
            )

    def _commit(self, reservation: Reservation, answer: Mapping[str, Any] | None) -> int | None:
        """Make the charge final (``answer`` is not kept: there is no cache)."""
        with self._lock:
            check_reserved(reservation, reservation.status, "commit")
        return None

    def _refund(self, reservation: Reservation) -> None:
        with self._lock:
            check_reserved(reservation, reservation.status, "refund")
            self._add(reservation.analyst, reservation.dataset, reservation.loss, -1)

    def cached_answer(
        self,
        analyst: str,
        dataset: str,
        *,
        fingerprint: str,
        data_version: str,
        loss: Budget,
    ) -> dict[str, Any] | None:
        """Always None: a scratch ledger keeps no answers."""
        self._row(analyst, dataset)
        return None

    def on_alert(self, callback: Callable[[Any], object]) -> Callable[[Any], object]:
        """Accepted for the protocol; a scratch ledger raises no alerts."""
        return callback
