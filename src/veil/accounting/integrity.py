"""A ledger trusted no further than its records (issue 34).

Every charge decision reads a grant's *running sums* (``veil_budgets.spent_*``, and a dataset
cap's), not its charges: a rewritten or corrupted sum would let a grant be overspent and
nothing would notice. :func:`mismatches` recomputes every grant's and cap's sums from its live
charges (:data:`~veil.accounting.reservation.LIVE`) in one snapshot and names each one that
differs; the service runs it when it opens the ledger and periodically, and stops charging on
a mismatch (:meth:`veil.Ledger.verify`).

:func:`abandon` resolves reservations left open by a worker that is gone (a crash, a kill):
charges still ``reserved`` long after they were made become ``abandoned`` — still charged (the
engine may have read the data), no answer released — so that the client's question "was it
answered?" gets a final answer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, func, select, update

from veil.accounting import spending
from veil.accounting.budget import Budget
from veil.accounting.records import loss_from
from veil.accounting.reservation import LIVE
from veil.accounting.spending import Spent
from veil.accounting.store import budgets, dataset_caps, events
from veil.errors import LedgerError

__all__ = ["ABANDONED_DETAIL", "Mismatch", "abandon", "mismatches"]

ABANDONED_DETAIL = (
    "abandoned: still reserved after {seconds:g} s, so its worker is taken to be gone; the "
    "charge stays, and no answer was or will be released"
)


@dataclass(frozen=True)
class Mismatch:
    """A grant (or, with ``analyst`` None, a dataset's cap) whose stored running sums differ
    from the sum of its live charges (``recomputed`` None: they cannot be summed under it)."""

    analyst: str | None
    dataset: str
    stored: Spent
    recomputed: Spent | None

    def __str__(self) -> str:
        what = (
            f"the cap of dataset {self.dataset!r}"
            if self.analyst is None
            else f"the grant of {self.analyst!r} on {self.dataset!r}"
        )
        found = (
            "cannot be summed" if self.recomputed is None else f"sum to {_sums(self.recomputed)}"
        )
        return f"{what}: its charges {found}, its running sums say {_sums(self.stored)}"


def _sums(spent: Spent) -> str:
    return f"ε={spent.epsilon}, δ={spent.delta}, ρ={spent.rho}"


def _spent(row: Any) -> Spent:
    return Spent(Fraction(row.spent_epsilon), Fraction(row.spent_delta), Fraction(row.spent_rho))


def _granted(row: Any) -> Budget:
    return loss_from(row.kind, row.epsilon, row.delta, row.rho)


# the live charges of each grant, one row per distinct loss with how many there are: a ledger
# of a million charges at a handful of ε values is a handful of rows
_LIVE_LOSSES = (
    select(
        events.c.budget_id,
        events.c.loss_kind,
        events.c.epsilon,
        events.c.delta,
        events.c.rho,
        func.count().label("n"),
    )
    .where(events.c.event == "charge", events.c.status.in_(LIVE))
    .group_by(
        events.c.budget_id, events.c.loss_kind, events.c.epsilon, events.c.delta, events.c.rho
    )
)


def _summed(total: Budget, losses: Iterable[tuple[Budget, int]]) -> Spent | None:
    """The running sums of ``losses`` (each ``n`` times) under the grant ``total``, exactly as
    the reserves added them (one charge's part, times ``n``: the sums are componentwise);
    None when one of them is of a kind ``total`` cannot pay for."""
    sums = Spent()
    for loss, n in losses:
        try:
            one = spending.add_charge(total, Spent(), loss)
        except LedgerError:
            return None
        sums = Spent(sums.epsilon + n * one.epsilon, sums.delta + n * one.delta,
                     sums.rho + n * one.rho)  # fmt: skip
    return sums


def mismatches(conn: Connection) -> list[Mismatch]:
    """Every grant and cap whose running sums differ from its live charges, read on ``conn``
    (one snapshot: a transaction that sees one state of the database throughout)."""
    losses: dict[int, list[tuple[Budget, int]]] = defaultdict(list)
    for r in conn.execute(_LIVE_LOSSES):
        losses[r.budget_id].append((loss_from(r.loss_kind, r.epsilon, r.delta, r.rho), r.n))
    found: list[Mismatch] = []
    by_dataset: dict[str, list[tuple[Budget, int]]] = defaultdict(list)
    for row in conn.execute(select(budgets).order_by(budgets.c.id)):
        mine = losses.get(row.id, [])
        by_dataset[row.dataset] += mine
        recomputed = _summed(_granted(row), mine)
        if recomputed != _spent(row):
            found.append(Mismatch(row.analyst, row.dataset, _spent(row), recomputed))
    for cap in conn.execute(select(dataset_caps).order_by(dataset_caps.c.dataset)):
        recomputed = _summed(_granted(cap), by_dataset.get(cap.dataset, []))
        if recomputed != _spent(cap):
            found.append(Mismatch(None, cap.dataset, _spent(cap), recomputed))
    return found


def abandon(conn: Connection, *, made_before: str, now: str, seconds: float) -> list[int]:
    """Mark ``abandoned`` every charge still ``reserved`` that was made before ``made_before``
    (a stored time); their ids. The running sums do not change: an abandoned charge counts."""
    rows = conn.execute(
        update(events)
        .where(
            events.c.event == "charge",
            events.c.status == "reserved",
            events.c.at < made_before,
        )
        .values(
            status="abandoned",
            updated_at=now,
            detail=ABANDONED_DETAIL.format(seconds=seconds),
        )
        .returning(events.c.id)
    )
    return sorted(int(r.id) for r in rows)
