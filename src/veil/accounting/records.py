"""The ledger's records and alerts, and the row ↔ value conversions of its storage."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from sqlalchemy import Connection, CursorResult, Row, select

from veil.accounting.budget import Budget
from veil.accounting.history import Record
from veil.accounting.store import SCHEMA_VERSION, alerts, answers, budgets, events
from veil.errors import LedgerError

__all__ = ["Alert", "Record"]  # Record: defined in veil.accounting.history, the shapes

CSV_COLUMNS = (
    "id", "at", "analyst", "dataset", "event", "status", "fingerprint", "data_version",
    "loss_kind", "epsilon", "delta", "rho", "answer_id", "detail", "query_text",
)  # fmt: skip


def now() -> str:
    """The current UTC time as stored (ISO 8601, microseconds)."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def loss_columns(loss: Budget) -> dict[str, str | None]:
    """A loss as exact text columns."""
    return {
        "loss_kind": loss.kind,
        "epsilon": None if loss.epsilon is None else str(loss.epsilon),
        "delta": str(loss.delta),
        "rho": None if loss.rho is None else str(loss.rho),
    }


def loss_from(kind: str | None, epsilon: str | None, delta: str | None, rho: str | None) -> Budget:
    """The inverse of :func:`loss_columns`."""
    if kind == "zcdp":
        return Budget(rho=Fraction(rho or "0"))
    return Budget(epsilon=Fraction(epsilon or "0"), delta=Fraction(delta or "0"))


def loss_key(loss: Budget) -> str:
    """The exact loss as part of a cache key."""
    return f"{loss.kind}:{loss.epsilon}:{loss.delta}:{loss.rho}"


def new_id(result: CursorResult[Any]) -> int:
    """The id of the row an INSERT created."""
    key = result.inserted_primary_key
    if key is None:  # pragma: no cover - every table has an autoincrement key
        raise LedgerError("the database did not return the id of a new row")
    return int(key[0])


@dataclass(frozen=True)
class Alert:
    """A budget crossed ``threshold`` (a share of the grant); fired once, ever."""

    analyst: str
    dataset: str
    threshold: Fraction
    used: Fraction
    granted: Budget
    at: datetime

    def __str__(self) -> str:
        return (
            f"privacy budget of analyst {self.analyst!r} on dataset {self.dataset!r} is "
            f"{float(self.used):.0%} spent (crossed the {float(self.threshold):.0%} alert; "
            f"granted {self.granted})"
        )


def record(r: Row[Any], analyst: str, dataset: str) -> Record:
    """A history record from an events row."""
    loss = None if r.loss_kind is None else loss_from(r.loss_kind, r.epsilon, r.delta, r.rho)
    return Record(
        id=r.id,
        at=datetime.fromisoformat(r.at),
        analyst=analyst,
        dataset=dataset,
        event=r.event,
        status=r.status,
        fingerprint=r.fingerprint,
        data_version=r.data_version,
        loss=loss,
        answer_id=r.answer_id,
        detail=r.detail,
        query=r.query_text,
    )


def dump(conn: Connection) -> dict[str, Any]:
    """Every row of every ledger table, oldest first (events carry analyst and dataset)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "budgets": [dict(r._mapping) for r in conn.execute(select(budgets).order_by(budgets.c.id))],
        "events": [
            dict(r._mapping)
            for r in conn.execute(
                select(events, budgets.c.analyst, budgets.c.dataset)
                .join(budgets, budgets.c.id == events.c.budget_id)
                .order_by(events.c.id)
            )
        ],
        "alerts": [dict(r._mapping) for r in conn.execute(select(alerts).order_by(alerts.c.id))],
        "answers": [dict(r._mapping) for r in conn.execute(select(answers).order_by(answers.c.id))],
    }


# a spreadsheet opening the export runs a cell that starts with one of these as a formula
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_ANALYST_TEXT = ("query_text", "detail")  # free text an analyst chose (the query) or caused


def _inert(value: Any) -> Any:
    """``value`` with a leading ``'`` when a spreadsheet would read it as a formula."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def to_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """Event rows as CSV with a header. Text an analyst wrote (the query, the detail) that a
    spreadsheet would run as a formula (``=HYPERLINK(…)``, ``+…``, ``-…``, ``@…``) gets a
    leading ``'`` (OWASP's CSV-injection advice); the JSON export keeps it as written."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _inert(v) if k in _ANALYST_TEXT else v for k, v in row.items()})
    return out.getvalue()
