"""Survey weights: ``weights="coeff"`` turns a query's COUNT(*), SUM(x) and AVG(x) into their
weighted forms, and the rule that checks the weights' bounds before anything is reserved.

Survey microdata carry a weight per row (the LFS's ``COEFF``, a census sample's person
weight): the number of people a row stands for. With weights bounds [w_min, w_max], declared
like any bounds (``bounds={"coeff": (0, 20)}``, from the data owner or the query, never from
the data) and 0 ≤ w_min, the engine clamps each row's weight w and value x, and per group

- weighted COUNT(*) = Σ clamp(w) — an ordinary sum of the weights column
  (:mod:`veil.aggregates.wcount`): one row moves it by at most max(|w_min|, |w_max|) = w_max;
- weighted SUM(x) = Σ clamp(w)·clamp(x) — an ordinary sum of the product column, whose range
  [p_min, p_max] is that of the four products of the bounds' ends
  (:meth:`veil.plan.nodes.Aggregate.bounds_of`, :mod:`veil.aggregates.wsum`);
- weighted AVG(x) = (Σ clamp(w)·clamp(x)) / (Σ clamp(w)), the ratio of those two noisy sums
  (post-processing; :mod:`veil.aggregates.wavg`).

Both sums are the ``sum`` statistic of :mod:`veil.compile.statistics` on a fixed-point grid
(exact integer sums, the same overflow rules), so their sensitivities are those of a sum with
the derived bounds, times the contribution limits — nothing new in the privacy argument: a
row's weight is one more of its own values, clamped like any other. A NULL or NaN weight
leaves its row out (the NULL rule), as a NULL value does.
"""

from __future__ import annotations

import dataclasses

from veil.accounting.budget import show
from veil.compile.constants import check_bounds
from veil.errors import BoundsError, InvalidArgumentError, UnsupportedQueryError
from veil.plan.nodes import AggregateCall, ColumnBounds, Plan
from veil.plan.tree import aggregate_of, replace_aggregate

__all__ = ["WEIGHTED", "check_weights", "weigh", "weights_bounds_missing"]

WEIGHTED = {"count": "wcount", "sum": "wsum", "avg": "wavg"}
"""The aggregates ``weights=`` applies to, and their weighted kinds."""


def weigh(plan: Plan, weights: str | None) -> Plan:
    """``plan`` with its COUNT(*), SUM and AVG weighted by the column ``weights`` (``None``:
    unchanged). Any other aggregate, or COUNT(col), is refused (``UnsupportedQueryError``,
    decided from the plan alone, before anything is reserved): a query either weights all its
    aggregates or none, so no released column is silently unweighted."""
    if weights is None:
        return plan
    if not isinstance(weights, str) or not weights:
        raise InvalidArgumentError(
            f"weights must be the name of a weights column, got {weights!r}; e.g. weights='coeff'",
            cli=f"--weights must name a weights column, got {weights!r}; e.g. --weights coeff",
        )
    agg = aggregate_of(plan)
    calls: list[AggregateCall] = []
    for a in agg.aggregates:
        if a.weights is not None:
            calls.append(a)  # already weighted (a plan weighted before)
            continue
        target = WEIGHTED.get(a.function)
        if target is None or (a.function == "count" and a.column is not None):
            shown = f"{a.function.upper()}({a.column or '*'})"
            raise UnsupportedQueryError(
                f"{shown} ({a.alias!r}) cannot be weighted: weights={weights!r} applies to "
                "COUNT(*), SUM(col) and AVG(col) only; run the other aggregates in a query "
                "without weights (weights=False where the session weights every query; for "
                "COUNT(col), count rows WHERE col IS NOT NULL)",
                cli=(
                    f"{shown} ({a.alias!r}) cannot be weighted: --weights applies to COUNT(*), "
                    "SUM(col) and AVG(col) only; run the other aggregates without --weights"
                ),
            )
        calls.append(dataclasses.replace(a, function=target, weights=weights))
    return replace_aggregate(plan, dataclasses.replace(agg, aggregates=tuple(calls)))


def weights_bounds_missing(column: str) -> BoundsError:
    """The error for a weights column without declared bounds."""
    need = f"bounds for the weights column {column!r} are required to weight by it; pass "
    return BoundsError(
        f"{need}bounds={{{column!r}: (0, w_max)}} with a w_max that does not depend on the data",
        cli=f"{need}--bounds {column}=0:W_MAX with a W_MAX that does not depend on the data",
    )


def check_weights(plan: Plan) -> None:
    """Part of the rule ``check_numbers`` (``veil.compile.rules``): weights bounds start at 0
    or above, and every
    product's range lies in the supported range (``veil.compile.constants.check_bounds``).
    A ``BoundsError`` naming the column, its bounds and the fix otherwise — decided from the
    plan alone, before anything is reserved."""
    agg = aggregate_of(plan)
    for a in agg.aggregates:
        if a.weights is None:
            continue
        b = agg.bounds_of(a.weights)
        if b is None:
            raise weights_bounds_missing(a.weights)
        if b.lower < 0:
            given = f"({show(b.lower)}, {show(b.upper)})"
            rule = (
                f"bounds for the weights column {a.weights!r} are {given}: a weight counts "
                "people, its lower bound must be at least 0; pass "
            )
            raise BoundsError(
                f"{rule}bounds={{{a.weights!r}: (0, {show(b.upper)})}}",
                cli=f"{rule}--bounds {a.weights}=0:{show(b.upper)}",
            )
        product = agg.bounds_of(a.value_column or "")
        if product is not None and a.kind.weighted != "count":
            check_bounds(ColumnBounds(product.column, product.lower, product.upper))
