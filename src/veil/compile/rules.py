"""The rewrite rules: small pure functions ``(plan, context) → plan``, applied in order.

``RULES`` checks public domains against the column types (a wrong-type key is refused before
anything is reserved), then runs bounding (privacy unit, contribution limits), clamping (bounds
for every column an aggregate clamps, within the range ``veil.compile.constants`` supports) and
mechanism choice with the budget split (measurements and partition selection). Each rule
returns a new plan; none reads data.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from veil.accounting.budget import Budget
from veil.accounting.limits import check_spend
from veil.compile.constants import (
    DEFAULT_QUANTILE_BUCKETS,
    check_bounds,
    check_edges,
    check_quantile_buckets,
)
from veil.compile.measure import build
from veil.compile.strata import check_group_bounds
from veil.compile.weights import check_weights, weights_bounds_missing
from veil.errors import BoundsError, SchemaError, UnsupportedQueryError
from veil.plan.canonical import call_order
from veil.plan.nodes import (
    ColumnBounds,
    ColumnType,
    Contribution,
    KeyValue,
    Plan,
    check_public_groups,
)
from veil.plan.tree import aggregate_of, replace_aggregate

__all__ = [
    "MEASURING",
    "RULES",
    "SHAPING",
    "Context",
    "Rule",
    "apply_rules",
    "build_measurements",
    "check_domains",
    "check_numbers",
    "check_query_budget",
    "resolve_bounds",
    "set_contribution",
    "set_privacy_unit",
]


@dataclass(frozen=True)
class Context:
    """What the rules may use besides the plan: the query's budget, the session's privacy unit,
    bounds (session metadata overridden by the query's), a contribution override."""

    budget: Budget
    privacy_unit: str | None = None
    bounds: Mapping[str, ColumnBounds] = field(default_factory=dict)
    contribution: Contribution | None = None
    quantile_buckets: int = DEFAULT_QUANTILE_BUCKETS


Rule = Callable[[Plan, Context], Plan]

_EXAMPLES: dict[str, str] = {
    "integer": "integers of the 64-bit range, e.g. [18, 19, 20]",
    "real": "finite numbers, e.g. [0.5, 1.0]",
    "string": "strings, e.g. ['CA', 'NY']",
    "boolean": "True/False",
    "temporal": "ISO dates or timestamps as strings, e.g. ['2024-01-31']",
    "binary": "strings, e.g. ['abc']",
}

_ARTICLE = {"integer": "an", "other": "an"}


_INTEGER_KEYS = (-(1 << 63), 1 << 64)  # every value of a signed or unsigned 64-bit column


def _fits(value: KeyValue, kind: ColumnType) -> bool:
    if value is None or kind == "other":
        return True
    if kind == "integer":
        if isinstance(value, float):
            whole = math.isfinite(value) and value.is_integer()
            return whole and _INTEGER_KEYS[0] <= value < _INTEGER_KEYS[1]
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return _INTEGER_KEYS[0] <= value < _INTEGER_KEYS[1]
    if kind == "real":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        try:
            return math.isfinite(float(value))
        except OverflowError:
            return False
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "temporal":
        if not isinstance(value, str):
            return False
        try:
            datetime.datetime.fromisoformat(value)
        except ValueError:
            return False
        return True
    return isinstance(value, str)


def _all_int64(values: tuple[KeyValue, ...]) -> bool:
    """True when every value is a plain int (not a bool) in ``_INTEGER_KEYS``' range: what
    :func:`_fits` accepts one by one for an integer column, decided in two C-speed passes."""
    if not all(type(v) is int for v in values):
        return False
    ints = [v for v in values if type(v) is int]  # the same values, typed for the bounds check
    return not ints or (_INTEGER_KEYS[0] <= min(ints) and max(ints) < _INTEGER_KEYS[1])


def check_domains(plan: Plan, ctx: Context) -> Plan:
    """Every public key must have its column's type: a ``SchemaError`` naming the column, the
    value and the fix otherwise. The schema is public, so this reads no data and is decided
    before anything is reserved (a mismatch would otherwise fail in the engine, charged)."""
    agg = aggregate_of(plan)
    for key in agg.keys:
        if key.domain is None:
            continue
        kind = agg.child.field(key.column).type
        if kind == "integer" and _all_int64(key.domain):
            continue  # every key an int within 64 bits: each one fits (checked in bulk)
        for value in key.domain:
            if not _fits(value, kind):
                article = _ARTICLE.get(kind, "a")
                raise SchemaError(
                    f"public domain of {key.column!r} holds {value!r} "
                    f"({type(value).__name__}), but {key.column!r} is {article} {kind} column; "
                    f"pass its keys as {_EXAMPLES.get(kind, kind)}"
                )
            _check_exact_key(key.column, value, kind)
    return plan


_EXACT_DOUBLE_INTEGERS = 2**53
"""Below this magnitude every integer is a double, and no other integer's double equals it."""


def _check_exact_key(column: str, value: KeyValue, kind: ColumnType) -> None:
    """One value per public key (``veil.plan.numbers``): a numeric key is compared with the
    column in the column's own arithmetic, so it must be exactly one value of it — an integer
    key of a real column a double (9007199254740993 compares equal to the double
    9007199254740992.0, so a row could be clamped to one key's bounds and released under
    another's), a double key of an integer column below 2^53 in magnitude (2^53 + 1 compares
    equal to 2^53 as a double). A ``SchemaError`` naming the key and the fix otherwise,
    before anything is reserved."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if kind == "real" and isinstance(value, int) and float(value) != value:
        raise SchemaError(
            f"public key {value} of {column!r} is not a double, but {column!r} is a real "
            f"column compared as doubles (the key would also match {float(value)!r}); pass "
            f"integer keys within ±2^53 or the double itself, {float(value)!r}"
        )
    if kind == "integer" and isinstance(value, float) and abs(value) >= _EXACT_DOUBLE_INTEGERS:
        raise SchemaError(
            f"public key {value!r} of {column!r} is a double beyond 2^53, which several "
            f"integers of {column!r} compare equal to; pass it as the integer {int(value)}"
        )


def set_privacy_unit(plan: Plan, ctx: Context) -> Plan:
    """The session's privacy unit applies to every aggregation; a plan may not weaken it."""
    agg = aggregate_of(plan)
    if ctx.privacy_unit is None or agg.privacy_unit == ctx.privacy_unit:
        return plan
    if agg.privacy_unit is not None:
        raise UnsupportedQueryError(
            f"the query's privacy unit {agg.privacy_unit!r} differs from the session's "
            f"{ctx.privacy_unit!r}; drop it from the query"
        )
    return replace_aggregate(plan, dataclasses.replace(agg, privacy_unit=ctx.privacy_unit))


def set_contribution(plan: Plan, ctx: Context) -> Plan:
    """Contribution limits: the query's override, else the plan's (defaults 1 and 1); with
    row-level privacy every row is a unit and the limits are 1 and 1, with the declared rows
    per person (``contributions=k``, kept in ``max_rows``) when there is one."""
    agg = aggregate_of(plan)
    wanted = ctx.contribution if ctx.contribution is not None else agg.contribution
    if agg.privacy_unit is None:
        wanted = Contribution(max_rows=wanted.max_rows)
    if wanted == agg.contribution:
        return plan
    return replace_aggregate(plan, dataclasses.replace(agg, contribution=wanted))


def resolve_bounds(plan: Plan, ctx: Context) -> Plan:
    """Bounds for exactly the columns a clamping aggregate reads: the query's, else the plan's;
    a missing one is a ``BoundsError`` that says how to pass it."""
    agg = aggregate_of(plan)
    needed = sorted({a.column for a in agg.aggregates if a.needs_bounds and a.column})
    # a MODE of a non-integer column has no bounds to use: it is refused for its candidates
    needed = [
        c for c in needed
        if agg.child.field(c).type == "integer"
        or any(a.column == c and a.function not in ("mode", "top_k") and a.needs_bounds
               for a in agg.aggregates)
    ]  # fmt: skip
    weights = sorted({a.weights for a in agg.aggregates if a.weights})  # survey weights
    needed = sorted({*needed, *weights})
    out: list[ColumnBounds] = []
    for col in needed:
        b = ctx.bounds.get(col) or agg.bounds_of(col)
        if b is None and col in weights:
            raise weights_bounds_missing(col)
        if b is None:
            fn = next(a.function for a in agg.aggregates if a.column == col and a.needs_bounds)
            need = f"bounds for {col!r} are required to compute {fn.upper()}({col}); pass "
            raise BoundsError(
                f"{need}bounds={{{col!r}: (lower, upper)}} with limits that do not depend on "
                "the data",
                cli=f"{need}--bounds {col}=LOWER:UPPER with limits that do not depend on the data",
            )
        out.append(ColumnBounds(col, b.lower, b.upper, b.groups))
    bounds = tuple(out)
    if bounds == agg.bounds:
        return plan
    return replace_aggregate(plan, dataclasses.replace(agg, bounds=bounds))


def check_query_budget(budget: Budget) -> None:
    """The privacy parameters one query may ask for (``veil.accounting.limits``): ε in
    [1e-12, 1e4] (ρ in the matching [5e-25, 5e7]), δ below 1/2."""
    check_spend(budget, what="one query")


def check_numbers(plan: Plan, ctx: Context) -> Plan:
    """Bounds and histogram edges within the range the lowering can write exactly and no row
    can overflow (``veil.compile.constants``): a ``BoundsError`` otherwise, before anything is
    reserved — a bound the engine misreads (1e-300 makes the fixed-point scale infinite) would
    make the query fail on some rows only."""
    agg = aggregate_of(plan)
    for b in agg.bounds:
        check_bounds(b)
        for _, lo, hi in b.groups:  # per-group bounds: the same range rules
            check_bounds(ColumnBounds(b.column, lo, hi))
    check_group_bounds(agg)
    check_public_groups(agg.keys)  # a per-query cap
    for key in agg.keys:
        check_edges(key)
    check_weights(plan)  # survey weights: bounds from 0 up, products within the range
    return plan


def build_measurements(plan: Plan, ctx: Context) -> Plan:
    """Mechanism choice and budget split (``veil.compile.measure``): fills the aggregation's
    measurements, partition selection and charged loss."""
    agg = aggregate_of(plan)
    check_query_budget(ctx.budget)
    check_quantile_buckets(ctx.quantile_buckets)
    # designed over the aggregates in their canonical order: the split (floating-point
    # weights, the last share taking the rest) then depends on what is asked, not on the
    # SELECT order, so a reordered query measures the same and is answered from the cache
    ordered = dataclasses.replace(agg, aggregates=tuple(sorted(agg.aggregates, key=call_order)))
    design = build(ordered, ctx.budget, buckets=ctx.quantile_buckets)
    new = dataclasses.replace(
        agg,
        budget=design.charged,
        measurements=design.measurements,
        selection=design.selection,
    )
    return replace_aggregate(plan, new)


SHAPING: tuple[Rule, ...] = (
    check_domains,
    set_privacy_unit,
    set_contribution,
    resolve_bounds,
    check_numbers,
)
"""The rules before the budget split: of the context they read only the privacy unit, the
bounds and the contribution (never the budget or the quantile grid), so the same question at
another ε or δ shapes to the same plan."""
MEASURING: tuple[Rule, ...] = (build_measurements,)
"""The rules that read the budget: mechanism choice and budget split."""
RULES: tuple[Rule, ...] = (*SHAPING, *MEASURING)


def apply_rules(plan: Plan, ctx: Context, rules: tuple[Rule, ...] = RULES) -> Plan:
    """``plan`` rewritten by each rule in turn."""
    for rule in rules:
        plan = rule(plan, ctx)
    return plan
