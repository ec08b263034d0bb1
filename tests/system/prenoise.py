"""Pre-noise aggregates for the system tests: compile a query with veil's own front end and
compiler, lower it with a salt the test chooses, and run the SQL on veil's DuckDB engine.

Nothing here is released or charged: it reads exact statistics of test data, which is what
the tests compare against pandas and against a neighbouring dataset. It uses the same modules
the Session uses (``veil.sql.parse`` → ``veil.compile.compile_plan`` → ``veil.compile.lower``
→ ``DuckDBEngine.execute``), never a re-implementation of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pyarrow as pa

from veil import Budget, Session
from veil.compile import Context, compile_plan, dialect, lower
from veil.engines.base import Engine
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Aggregate, ColumnBounds, Contribution, KeyValue, Measurement
from veil.plan.tree import aggregate_of
from veil.release.keys import group_keys, released_key
from veil.release.quantiles import split_together
from veil.sql import parse

Key = tuple[Any, ...]


@dataclass(frozen=True)
class Exact:
    """The exact integer statistics of one compiled aggregation.

    ``stats[group][measurement name]`` for counts and fixed-point sums (plus ``"__n"``, the
    bounded row count); ``buckets[measurement name][group][bucket]`` for quantiles.
    """

    agg: Aggregate
    stats: dict[Key, dict[str, int]]
    buckets: dict[str, dict[Key, dict[int, int]]]

    def measurement(self, name: str) -> Measurement:
        return next(m for m in self.agg.measurements if m.name == name)


def compile_query(
    engine: DuckDBEngine,
    sql: str,
    *,
    budget: Budget,
    privacy_unit: str | None = None,
    bounds: Mapping[str, tuple[float, float]] | None = None,
    contribution: Contribution | None = None,
    domains: Mapping[str, Sequence[KeyValue]] | None = None,
) -> Aggregate:
    """The compiled aggregation of ``sql`` (measurements, sensitivities and scales filled in)."""
    schemas = {name: engine.schema(name) for name in engine.tables}
    plan = parse(
        sql,
        schemas,
        privacy_unit=privacy_unit,
        bounds=bounds,
        contribution=contribution,
        domains=domains,
    )
    ctx = Context(
        budget=budget,
        privacy_unit=privacy_unit,
        bounds={c: ColumnBounds(c, lo, hi) for c, (lo, hi) in (bounds or {}).items()},
        contribution=contribution,
    )
    return aggregate_of(compile_plan(plan, ctx))


def session_aggregate(session: Session, sql: str, **options: Any) -> Aggregate:
    """The aggregation ``session.sql(sql, **options)`` runs, as compiled by ``session.explain``
    (same rules, bounds and contribution limits; nothing is read or charged)."""
    return aggregate_of(session.explain(sql, **options).plan)


def exact(engine: Engine, agg: Aggregate, *, salt: int = 12345, together: bool = False) -> Exact:
    """Run ``agg``'s lowered SQL (bounding order keyed by ``salt``) on ``engine``; groups are
    keyed by their released key values (``veil.release.keys.released_key``).

    ``together``: run the one statement the Session runs for the statistics and the quantile
    cells (``Lowered.together``, split by ``split_together``) instead of ``main`` and one
    statement per quantile and mode."""
    lowered = lower(agg, dialect(engine.dialect), salt=salt)
    stats: dict[Key, dict[str, int]] = {}
    cells: dict[str, pa.Table] = {}
    if together:
        if lowered.together is None:
            raise ValueError("the aggregation has no quantile: nothing is run together")
        main, cells = split_together(lowered, engine.execute(lowered.together))
    else:
        main = engine.execute(lowered.main)
    for raw, row in zip(group_keys(agg, main, lowered.keys), main.to_pylist(), strict=True):
        key = released_key(agg, raw)
        values = {"__n": int(row["__n"])}
        values.update({name: int(row[col]) for name, col in lowered.columns})
        stats[key] = values
    buckets: dict[str, dict[Key, dict[int, int]]] = {}
    for name, tree in lowered.quantiles:
        per: dict[Key, dict[int, int]] = {}
        table = cells[name] if name in cells else engine.execute(tree)
        for raw, row in zip(group_keys(agg, table, lowered.keys), table.to_pylist(), strict=True):
            cell = per.setdefault(released_key(agg, raw), {})  # a cell may come in several rows
            # a listed table (DuckDB's fine grids) holds each group's cells as one list
            listed = row["__b"] if isinstance(row["__b"], list) else None
            pairs = [(b, 1) for b in listed] if listed is not None else [(row["__b"], row["__c"])]
            for b, c in pairs:
                cell[int(b)] = cell.get(int(b), 0) + int(c)
        buckets[name] = per
    return Exact(agg, stats, buckets)


def sum_in_value_units(m: Measurement, fixed_point_sum: int, rows: int) -> Fraction:
    """Σ clamp(x) recovered from the fixed-point statistic: step·Σv + centre·n."""
    return m.step * fixed_point_sum + m.centre * rows
