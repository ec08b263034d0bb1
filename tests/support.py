"""Helpers shared by the tests (importable as ``support`` thanks to pytest's pythonpath): a
seeded random source, a hand-moved :class:`Clock`, the ``people`` table of the plan-level tests
and :func:`compiled`."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import ModuleType

import pytest
import sqlglot
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from veil.accounting import Budget
from veil.compile import Context, apply_rules
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Field,
    Filter,
    GroupKey,
    Plan,
    Scan,
    aggregate_of,
)
from veil.plan.nodes import ColumnType


class SeededSource:
    """A deterministic :class:`veil.random.RandomSource` for repeatable statistical tests.

    A ChaCha20 keystream keyed by SHA-256 of the seed: uniform bytes, fast, and the same on
    every run. It is passed explicitly to the function under test; veil never uses it itself.
    """

    def __init__(self, seed: int | str) -> None:
        key = hashlib.sha256(f"veil-test-seed:{seed}".encode()).digest()
        self._enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        self.bytes_drawn = 0

    def random_bytes(self, n: int) -> bytes:
        self.bytes_drawn += n
        return self._enc.update(bytes(n))


class Clock:
    """A wall clock that moves only when the test says (:meth:`advance`), so a test of expiry
    does not depend on how fast the machine runs the lines between two readings.

    :meth:`install` puts it in the modules under test in place of what they read the time with:
    their ``datetime`` (``datetime.now``), ``now()`` (``veil.accounting.records.now``'s ISO
    text) and ``_now()`` (a ``datetime``), whichever they have.
    """

    def __init__(self, at: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.at = at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)

    def install(self, monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> None:
        clock = self

        class _Datetime(datetime):
            @classmethod
            def now(cls, tz: object = None) -> datetime:  # type: ignore[override]
                return clock.at if tz is not None else clock.at.replace(tzinfo=None)

        for module in modules:
            if getattr(module, "datetime", None) is datetime:
                monkeypatch.setattr(module, "datetime", _Datetime)
            if callable(getattr(module, "now", None)):
                monkeypatch.setattr(
                    module, "now", lambda: clock.at.isoformat(timespec="microseconds")
                )
            if callable(getattr(module, "_now", None)):
                monkeypatch.setattr(module, "_now", lambda: clock.at)


COLUMNS: dict[str, ColumnType] = {
    "user_id": "integer",
    "state": "string",
    "sex": "string",
    "age": "integer",
    "income": "real",
    "hours": "real",
    "born": "temporal",
}
"""Every column the plan-level tests give the ``people`` table, with its type."""


def people(*columns: str) -> Scan:
    """The ``people`` table with ``columns`` (in that order; default: user_id, state, age,
    income), typed as in :data:`COLUMNS`."""
    names = columns or ("user_id", "state", "age", "income")
    return Scan("people", tuple(Field(name, COLUMNS[name]) for name in names))


PEOPLE = people()
"""``people(user_id, state, age, income)``; ``PEOPLE.columns`` is its schema for the parser."""

DELTA = Fraction(1, 10**6)
BUDGET = Budget(epsilon=1, delta=DELTA)


def compiled(
    keys: tuple[GroupKey, ...] = (GroupKey("state"),),
    aggregates: tuple[AggregateCall, ...] = (AggregateCall("n", "count"),),
    budget: Budget = BUDGET,
    *,
    table: Plan = PEOPLE,
    predicate: str | None = None,
    bounds: tuple[ColumnBounds, ...] = (ColumnBounds("income", 0, 100),),
    unit: str | None = "user_id",
    contribution: Contribution | None = None,
    plan_unit: str | None = None,
) -> Aggregate:
    """The aggregation of ``table`` (filtered by the SQL ``predicate``) after the
    compiler's rules, as ``Session`` compiles it: ``unit`` and ``contribution`` go to the
    rules' :class:`~veil.compile.Context`, ``plan_unit`` to the plan itself."""
    child = table if predicate is None else Filter(table, sqlglot.parse_one(predicate))
    plan = Aggregate(child, keys=keys, aggregates=aggregates, bounds=bounds, privacy_unit=plan_unit)
    ctx = Context(budget=budget, privacy_unit=unit, contribution=contribution)
    return aggregate_of(apply_rules(plan, ctx))
