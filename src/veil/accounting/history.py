"""A budget's history as values: its records and the pages they are read in, newest first.

Shapes only (no database): the ledger (:mod:`veil.accounting.records`,
:mod:`veil.accounting.pages`) builds them from its rows, the service's client
(:mod:`veil.client`) from the service's JSON, so importing them loads no SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import overload

from veil.accounting.budget import Budget
from veil.errors import InvalidArgumentError

__all__ = ["MAX_PAGE", "HistoryPage", "Record", "check_page"]


@dataclass(frozen=True)
class Record:
    """One line of a budget's history: a grant, a charge, a cache hit or an alert."""

    id: int
    at: datetime
    analyst: str
    dataset: str
    event: str  # "grant" | "charge" | "cache_hit" | "alert"
    status: str | None  # charges: "reserved" | "committed" | "refunded"
    fingerprint: str | None
    data_version: str | None
    loss: Budget | None  # the loss charged (for a cache hit: the loss of the cached answer)
    answer_id: int | None
    detail: str | None
    query: str | None = None  # charges: the SQL (or plan) that was charged


MAX_PAGE = 1000
"""The most events one page may hold."""


@dataclass(frozen=True)
class HistoryPage(Sequence[Record]):
    """Events of a history, newest first, and the cursor of the page after it: pass ``next``
    as ``before`` to read the older events (None: this page reaches the first event)."""

    records: tuple[Record, ...]
    next: int | None = field(default=None)

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | Sequence[Record]:
        return self.records[index]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)


def check_page(limit: object, before: object) -> tuple[int, int | None]:
    """``limit`` and ``before`` checked: an int in [1, MAX_PAGE] and None or a positive int."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(
            f"limit must be a whole number of events from 1 to {MAX_PAGE}, got {limit!r}"
        )
    if before is not None and (isinstance(before, bool) or not isinstance(before, int)
                               or before < 1):  # fmt: skip
        raise InvalidArgumentError(
            f"before must be the cursor a page gave as next (a positive id), got {before!r}"
        )
    return limit, before
