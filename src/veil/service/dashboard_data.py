"""What the dashboard shows, read from the ledger: each visible budget with its spent, reserved
and remaining loss and its spending over time, the latest charges, the alerts.

An administrator sees every grant; an analyst only their own. Everything comes from one
snapshot of the ledger (:meth:`veil.Ledger.read`), so that the bar, the chart and the table of
one budget agree, and from a bounded read whatever the history's length (issue 34: the page
read every event of every grant, and each cache hit is one): the bars from the grants' running
sums (which the service checks against the charges, :meth:`veil.Ledger.verify`) less the
charges still reserved; the chart from the newest :data:`CHART_CHARGES` charges walked back
from the sums; counts up to :data:`~veil.accounting.pages.COUNT_CAP` (more shows as "10,000+");
the audit table a page of :data:`AUDIT_ROWS` charges
at a time (``?before=``). "Used" is the ledger's one definition
(:func:`veil.accounting.spending.used_fraction`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, select

from veil.accounting import pages, spending
from veil.accounting.budget import Budget
from veil.accounting.ledger import Ledger
from veil.accounting.pages import COUNT_CAP, HistoryPage
from veil.accounting.records import loss_columns, loss_from
from veil.accounting.reservation import LIVE
from veil.accounting.spending import Spent
from veil.accounting.store import alerts as alerts_table
from veil.accounting.store import budgets, dataset_caps, events
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
"""The audit table shows this many charges a page, newest first; the CSV export has all."""

CHART_CHARGES = 500
"""A grant's chart draws its newest this many charges (it draws at most two per pixel)."""


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
    spent: Spent  # the exact running sums of the live (reserved, committed, abandoned) charges
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
    audit: tuple[Charge, ...]  # a page, newest first, at most AUDIT_ROWS
    charges: int  # every charge of the visible budgets
    cache_hits: int
    alerts: tuple[AlertLine, ...]  # the latest first
    caps: tuple[tuple[str, Budget, Budget], ...]  # administrators: (dataset, cap, left of it)
    audit_next: int | None = None  # the cursor of the older charges (None: no older ones)
    before: int | None = None  # the cursor this page of the audit table was read below
    counts_capped: bool = False  # a grant has more charges or cache hits than COUNT_CAP

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


def _steps(
    total: Budget, live: Spent, recent: HistoryPage, granted_at: datetime, now: datetime
) -> tuple[tuple[datetime, Fraction], ...]:
    """(when, used after it) for the newest charges of a grant (``recent``, newest first),
    walked back from its running sums ``live``: from the grant on (starting at 0) when
    ``recent`` holds every charge, else from the oldest shown."""
    after = live
    points: list[tuple[datetime, Fraction]] = []
    for r in recent:
        if r.status in LIVE and r.loss is not None:
            points.append((r.at, used(total, after)))
            after = spending.remove_charge(total, after, r.loss)
    points.reverse()
    if recent.next is None:
        return ((granted_at, Fraction(0)), *points)
    return ((points[0][0] if points else now, used(total, after)), *points)


def _spent(row: Any) -> Spent:
    return Spent(Fraction(row.spent_epsilon), Fraction(row.spent_delta), Fraction(row.spent_rho))


def _read(
    conn: Connection,
    viewer: Principal,
    now: datetime,
    audit_rows: int,
    before: int | None,
) -> Overview:
    """The overview from one snapshot of the ledger, a bounded read whatever its history's
    length: the budget rows and their running sums, the charges still reserved, per grant
    its newest :data:`CHART_CHARGES` charges and its alerts, event counts (SQL aggregates), and
    one page of the audit table."""
    only = None if viewer.is_admin else viewer.name
    query = select(budgets).order_by(budgets.c.analyst, budgets.c.dataset)
    if only is not None:
        query = query.where(budgets.c.analyst == only)
    reserved_by = _reserved_by(conn)
    warned_by = _alerts_by(conn)
    views: list[BudgetView] = []
    alerts: list[AlertLine] = []
    rows = conn.execute(query).all()
    for row in rows:
        total = loss_from(row.kind, row.epsilon, row.delta, row.rho)
        live = _spent(row)
        reserved = Spent()
        for loss in reserved_by.get(row.id, ()):
            reserved = spending.add_charge(total, reserved, loss)
        committed = Spent(
            live.epsilon - reserved.epsilon, live.delta - reserved.delta, live.rho - reserved.rho
        )
        recent = pages.events_page(
            conn, row.id, row.analyst, row.dataset, limit=CHART_CHARGES, before=None,
            event="charge",
        )  # fmt: skip
        warned = warned_by.get(row.id, [])
        alerts += [AlertLine(at, row.analyst, row.dataset, said) for at, said in warned]
        kinds = pages.counts(conn, row.id)
        used_now, used_committed = used(total, live), used(total, committed)
        views.append(
            BudgetView(
                analyst=row.analyst,
                dataset=row.dataset,
                granted=total,
                spent=live,
                remaining=spending.remaining(total, live),
                committed=used_committed,
                reserved=used_now - used_committed,
                left=primary(total) - used_now,
                used_share=spending.used_fraction(total, live),
                steps=_steps(total, live, recent, datetime.fromisoformat(row.created_at), now),
                charges=kinds.get("charge", 0),
                cache_hits=kinds.get("cache_hit", 0),
                alerts=len(warned),
            )
        )
    grants = [(row.id, row.analyst, row.dataset) for row in rows]
    page = pages.charges(conn, grants, limit=audit_rows, before=before)
    hits = pages.cache_hits(conn, [r.answer_id for r in page if r.answer_id is not None])
    audit = tuple(
        Charge(
            id=r.id, at=r.at, analyst=r.analyst, dataset=r.dataset, fingerprint=r.fingerprint,
            query=r.query, loss=r.loss, status=r.status,
            cache_hits=0 if r.answer_id is None else hits.get(r.answer_id, 0),
        )
        for r in page
    )  # fmt: skip
    alerts.sort(key=lambda a: a.at, reverse=True)
    caps: list[tuple[str, Budget, Budget]] = []
    if viewer.is_admin:
        for cap in conn.execute(select(dataset_caps).order_by(dataset_caps.c.dataset)):
            cap_total = loss_from(cap.kind, cap.epsilon, cap.delta, cap.rho)
            caps.append((cap.dataset, cap_total, spending.remaining(cap_total, _spent(cap))))
    return Overview(
        viewer=viewer,
        now=now,
        budgets=tuple(views),
        audit=audit,
        charges=sum(v.charges for v in views),
        cache_hits=sum(v.cache_hits for v in views),
        alerts=tuple(alerts),
        caps=tuple(caps),
        audit_next=page.next,
        before=before,
        counts_capped=any(max(v.charges, v.cache_hits) > COUNT_CAP for v in views),
    )


def _alerts_by(conn: Connection) -> dict[int, list[tuple[datetime, str]]]:
    """budget id → its alerts, as the ledger words them in the history (the alerts' own table:
    a row per threshold crossed, never a scan of the events)."""
    out: dict[int, list[tuple[datetime, str]]] = {}
    for r in conn.execute(select(alerts_table).order_by(alerts_table.c.id)):
        used_share, threshold = float(Fraction(r.used)), float(Fraction(r.threshold))
        said = f"{used_share:.2%} spent, crossed the {threshold:.0%} threshold"
        out.setdefault(r.budget_id, []).append((datetime.fromisoformat(r.at), said))
    return out


def _reserved_by(conn: Connection) -> dict[int, list[Budget]]:
    """budget id → the losses of its charges still reserved (few: the others are settled; a
    partial index holds them)."""
    out: dict[int, list[Budget]] = {}
    rows = conn.execute(
        select(events.c.budget_id, events.c.loss_kind, events.c.epsilon, events.c.delta,
               events.c.rho)
        .where(events.c.event == "charge", events.c.status == "reserved")
    )  # fmt: skip
    for r in rows:
        out.setdefault(r.budget_id, []).append(loss_from(r.loss_kind, r.epsilon, r.delta, r.rho))
    return out


def overview(
    ledger: Ledger,
    viewer: Principal,
    now: datetime,
    *,
    audit_rows: int = AUDIT_ROWS,
    before: int | None = None,
) -> Overview:
    """Everything ``viewer`` may see: every grant for an administrator, their own for an
    analyst (nothing of anyone else's, not even a name); the audit table's page of charges
    older than ``before`` (None: the newest)."""
    return ledger.read(lambda conn: _read(conn, viewer, now, audit_rows, before))


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
