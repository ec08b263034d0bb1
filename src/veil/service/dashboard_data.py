"""What the dashboard shows, read from the ledger: each visible budget with its spent, reserved
and remaining loss and its spending over time, the latest charges, the alerts.

An administrator sees every grant; an analyst only their own. The sums are recomputed from each
budget's history (its live charges, added with :func:`veil.accounting.spending.add_charge`, as
:meth:`veil.Ledger.check` does), so that the bar, the chart and the table of one budget come
from one consistent read; "used" is the ledger's one definition
(:func:`veil.accounting.spending.used_fraction`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from veil.accounting import spending
from veil.accounting.budget import Budget
from veil.accounting.ledger import Ledger
from veil.accounting.records import Record, loss_columns
from veil.accounting.spending import Spent
from veil.service.principals import Principal

__all__ = [
    "AUDIT_ROWS",
    "AlertLine",
    "BudgetView",
    "Charge",
    "Overview",
    "overview",
    "own_events_csv_rows",
]

AUDIT_ROWS = 200
"""The audit table shows the latest this many charges; the CSV export has all."""

_LIVE = ("reserved", "committed")


@dataclass(frozen=True)
class Charge:
    """One charge of the audit trail, with how often its answer was served from the cache."""

    id: int
    at: datetime
    analyst: str
    dataset: str
    fingerprint: str | None
    query: str | None
    loss: Budget | None
    status: str | None
    cache_hits: int


@dataclass(frozen=True)
class AlertLine:
    at: datetime
    analyst: str
    dataset: str
    detail: str


@dataclass(frozen=True)
class BudgetView:
    """One grant. Amounts are in the grant's unit (:attr:`unit`: ε, or ρ for a zCDP grant):
    ``committed + reserved`` is what can no longer be spent, ``left`` what can."""

    analyst: str
    dataset: str
    granted: Budget
    spent: Spent  # the exact running sums of the live (reserved and committed) charges
    remaining: Budget
    committed: Fraction
    reserved: Fraction
    left: Fraction
    used_share: Fraction  # 1 = exhausted (the largest share over ε, δ, ρ)
    steps: tuple[tuple[datetime, Fraction], ...]  # (when, used after it), from the grant on
    charges: int
    cache_hits: int
    alerts: int

    @property
    def unit(self) -> str:
        return "ρ" if self.granted.kind == "zcdp" else "ε"

    @property
    def total(self) -> Fraction:
        return primary(self.granted)


@dataclass(frozen=True)
class Overview:
    viewer: Principal
    now: datetime
    budgets: tuple[BudgetView, ...]
    audit: tuple[Charge, ...]  # the latest first, at most AUDIT_ROWS
    charges: int  # every charge of the visible budgets
    cache_hits: int
    alerts: tuple[AlertLine, ...]  # the latest first
    caps: tuple[tuple[str, Budget, Budget], ...]  # administrators: (dataset, cap, left of it)

    @property
    def capped(self) -> bool:
        return self.charges > len(self.audit)


def primary(budget: Budget) -> Fraction:
    """ρ of a zCDP budget, ε of the others (what a bar of the grant measures)."""
    if budget.kind == "zcdp":
        return budget.rho or Fraction(0)
    return budget.epsilon or Fraction(0)


def used(total: Budget, spent: Spent) -> Fraction:
    """What ``spent`` uses of ``total`` in its unit: the total less what is still left."""
    if total.kind == "pure" or (total.kind == "approx" and spent.rho == 0):
        return min(spent.epsilon, total.eps)  # spending.remaining's, without a Budget per step
    if total.kind == "zcdp":
        return min(spent.rho, total.rho or Fraction(0))
    return primary(total) - primary(spending.remaining(total, spent))


def _budget(
    analyst: str, dataset: str, total: Budget, history: list[Record], now: datetime
) -> tuple[BudgetView, list[Charge], list[AlertLine]]:
    hits = Counter(r.answer_id for r in history if r.event == "cache_hit")
    live = committed = Spent()
    steps = [(history[0].at if history else now, Fraction(0))]
    charges: list[Charge] = []
    alerts: list[AlertLine] = []
    for r in history:
        if r.event == "charge":
            if r.status in _LIVE and r.loss is not None:
                live = spending.add_charge(total, live, r.loss)
                if r.status == "committed":
                    committed = spending.add_charge(total, committed, r.loss)
                steps.append((r.at, used(total, live)))
            charges.append(
                Charge(
                    id=r.id,
                    at=r.at,
                    analyst=analyst,
                    dataset=dataset,
                    fingerprint=r.fingerprint,
                    query=r.query,
                    loss=r.loss,
                    status=r.status,
                    cache_hits=0 if r.answer_id is None else hits[r.answer_id],
                )
            )
        elif r.event == "alert":
            alerts.append(AlertLine(r.at, analyst, dataset, r.detail or "a threshold crossed"))
    used_now, used_committed = used(total, live), used(total, committed)
    view = BudgetView(
        analyst=analyst,
        dataset=dataset,
        granted=total,
        spent=live,
        remaining=spending.remaining(total, live),
        committed=used_committed,
        reserved=used_now - used_committed,
        left=primary(total) - used_now,
        used_share=spending.used_fraction(total, live),
        steps=tuple(steps),
        charges=len(charges),
        cache_hits=sum(hits.values()),
        alerts=len(alerts),
    )
    return view, charges, alerts


def overview(
    ledger: Ledger, viewer: Principal, now: datetime, *, audit_rows: int = AUDIT_ROWS
) -> Overview:
    """Everything ``viewer`` may see: every grant for an administrator, their own for an
    analyst (nothing of anyone else's, not even a name)."""
    pairs = [(a, d) for a, d in ledger.grants() if viewer.is_admin or a == viewer.name]
    budgets: list[BudgetView] = []
    charges: list[Charge] = []
    alerts: list[AlertLine] = []
    for analyst, dataset in pairs:
        view, mine, warned = _budget(
            analyst,
            dataset,
            ledger.granted(analyst, dataset),
            ledger.history(analyst, dataset),
            now,
        )
        budgets.append(view)
        charges += mine
        alerts += warned
    charges.sort(key=lambda c: (c.at, c.id), reverse=True)
    alerts.sort(key=lambda a: a.at, reverse=True)
    caps: list[tuple[str, Budget, Budget]] = []
    if viewer.is_admin:
        for dataset in sorted({d for _, d in pairs}):
            cap = ledger.dataset_cap(dataset)
            if cap is not None:
                caps.append((dataset, *cap))
    return Overview(
        viewer=viewer,
        now=now,
        budgets=tuple(budgets),
        audit=tuple(charges[:audit_rows]),
        charges=len(charges),
        cache_hits=sum(b.cache_hits for b in budgets),
        alerts=tuple(alerts),
        caps=tuple(caps),
    )


def own_events_csv_rows(ledger: Ledger, analyst: str) -> list[dict[str, object]]:
    """Every event of ``analyst``'s own budgets, oldest first, as rows of the ledger's CSV
    export (:func:`veil.accounting.records.to_csv`)."""
    rows: list[tuple[int, dict[str, object]]] = []
    for a, d in ledger.grants():
        if a != analyst:
            continue
        for r in ledger.history(a, d):
            row: dict[str, object] = {
                "id": r.id,
                "at": r.at.isoformat(timespec="microseconds"),
                "analyst": a,
                "dataset": d,
                "event": r.event,
                "status": r.status,
                "fingerprint": r.fingerprint,
                "data_version": r.data_version,
                **(loss_columns(r.loss) if r.loss is not None else {}),
                "answer_id": r.answer_id,
                "detail": r.detail,
                "query_text": r.query,
            }
            rows.append((r.id, row))
    return [row for _, row in sorted(rows, key=lambda pair: pair[0])]
