"""Helpers shared by the tests (importable as ``support`` thanks to pytest's pythonpath): a
seeded random source, the ``people`` table of the plan-level tests and :func:`compiled`."""

from __future__ import annotations

import hashlib
from fractions import Fraction

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
