"""Histories read a page at a time, newest first (issue 34): what the API, the clients, the
CLI and the dashboard show of a ledger whose events grow without bound (each cache hit is one).

A page is at most ``limit`` events with ids below a cursor (``before``), in descending id order
— the order they were written in, newest first; the next page's cursor is the id of the last
event shown. A page is read by index (``veil_events_page``: budget, id; ``veil_events_kind``:
budget, kind, id), so its cost does not grow with the history; counts are index ranges too,
capped at :data:`COUNT_CAP`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from veil.accounting.history import MAX_PAGE, HistoryPage, Record, check_page
from veil.accounting.records import record
from veil.accounting.store import budgets, events

__all__ = [
    "COUNT_CAP",
    "MAX_PAGE",
    "HistoryPage",
    "cache_hits",
    "charges",
    "check_page",
    "counts",
    "events_page",
    "open_charges",
]

COUNT_CAP = 10_000
"""Counts of a history's events stop here (:func:`counts`): more reads as ``COUNT_CAP`` + 1."""


def events_page(
    conn: Connection,
    budget_id: int,
    analyst: str,
    dataset: str,
    *,
    limit: int,
    before: int | None,
    event: str | None = None,
) -> HistoryPage:
    """The newest ``limit`` events of budget ``budget_id`` below ``before`` (of one kind, with
    ``event``)."""
    query = select(events).where(events.c.budget_id == budget_id)
    if before is not None:
        query = query.where(events.c.id < before)
    if event is not None:
        query = query.where(events.c.event == event)
    rows = conn.execute(query.order_by(events.c.id.desc()).limit(limit + 1)).all()
    shown = tuple(record(r, analyst, dataset) for r in rows[:limit])
    return HistoryPage(shown, shown[-1].id if len(rows) > limit else None)


def charges(
    conn: Connection,
    grants: Sequence[tuple[int, str, str]],
    *,
    limit: int,
    before: int | None,
) -> HistoryPage:
    """The newest ``limit`` charges below ``before`` of the ``grants`` (budget id, analyst,
    dataset): the dashboard's audit table. Each grant's newest are read by index, then merged
    (a bounded read: at most ``limit`` + 1 rows a grant, never a sort of every charge)."""
    merged: list[Record] = []
    more = False
    for budget_id, analyst, dataset in grants:
        page = events_page(
            conn, budget_id, analyst, dataset, limit=limit, before=before, event="charge"
        )
        merged += page
        more = more or page.next is not None
    merged.sort(key=lambda r: r.id, reverse=True)
    shown = tuple(merged[:limit])
    more = more or len(merged) > limit
    return HistoryPage(shown, shown[-1].id if more and shown else None)


def counts(conn: Connection, budget_id: int, *, cap: int = COUNT_CAP) -> dict[str, int]:
    """Event kind → how many budget ``budget_id`` has, each counted up to ``cap`` + 1 (an
    index range of at most that many entries: more than ``cap`` reads as ``cap`` + 1)."""
    out: dict[str, int] = {}
    for kind in ("grant", "charge", "cache_hit", "alert"):
        first = (
            select(events.c.id)
            .where(events.c.budget_id == budget_id, events.c.event == kind)
            .limit(cap + 1)
            .subquery()
        )
        out[kind] = int(conn.execute(select(func.count()).select_from(first)).scalar_one())
    return out


def cache_hits(conn: Connection, answer_ids: Sequence[int]) -> dict[int, int]:
    """answer id → how often it was served from the cache, for ``answer_ids``."""
    if not answer_ids:
        return {}
    rows: Any = conn.execute(
        select(events.c.answer_id, func.count().label("n"))
        .where(events.c.event == "cache_hit", events.c.answer_id.in_(sorted(set(answer_ids))))
        .group_by(events.c.answer_id)
    )
    return {int(r.answer_id): int(r.n) for r in rows}


def open_charges(conn: Connection) -> list[Record]:
    """The charges still ``reserved``, oldest first (few: the others are settled; a partial
    index holds them)."""
    rows = conn.execute(
        select(events, budgets.c.analyst, budgets.c.dataset)
        .join(budgets, budgets.c.id == events.c.budget_id)
        .where(events.c.event == "charge", events.c.status == "reserved")
        .order_by(events.c.id)
    ).all()
    return [record(r, r.analyst, r.dataset) for r in rows]
