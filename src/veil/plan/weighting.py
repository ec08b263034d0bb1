"""Survey weights in the plan: the name of a weighted sum's per-row product and the checks an
:class:`veil.plan.nodes.Aggregate` makes of its weighted calls when it is built (schema only,
no data; the rewrite and the bounds rules are in ``veil.compile.weights``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from veil.errors import SchemaError, UnsupportedQueryError

if TYPE_CHECKING:
    from veil.plan.nodes import Aggregate, AggregateCall

__all__ = ["check_weights", "product_name"]


def product_name(column: str, weights: str) -> str:
    """The name of the per-row product ``clamp(column) · clamp(weights)`` a weighted sum adds
    up (a measurement's column; no table column may be called so, see :func:`check_weights`)."""
    return f"{column} * {weights}"


def check_weights(agg: Aggregate, aggs: tuple[AggregateCall, ...]) -> None:
    """One numeric weights column per aggregation, not the privacy unit, and no table column
    named like a product of a weighted call; ``SchemaError`` / ``UnsupportedQueryError``
    naming the column and the fix otherwise."""
    from veil.plan.nodes import NUMERIC_TYPES, declare_hint

    weights = sorted({a.weights for a in aggs if a.weights is not None})
    if not weights:
        return
    if len(weights) > 1:
        raise UnsupportedQueryError(
            f"one query may weight by one column, got {weights}; run one query per weights"
        )
    f = agg.child.field(weights[0])
    if f.type not in NUMERIC_TYPES:
        scan = agg.scan()
        hint = declare_hint(f.name, f.type, scan.table, declarable=scan.declarable)
        raise SchemaError(
            f"the weights column {f.name!r} is {f.type}, not numeric; weight by a numeric "
            f"column{hint}"
        )
    if f.name == agg.privacy_unit:
        raise UnsupportedQueryError(
            f"weighting by the privacy unit {f.name!r} is not supported; weight by another column"
        )
    names = set(agg.child.column_names())
    for a in aggs:
        v = a.value_column
        if a.kind.weighted in ("sum", "mean") and v in names:
            raise UnsupportedQueryError(
                f"the table has a column called {v!r}, the name veil gives the product of "
                f"{a.column!r} and its weights; rename that column in a view"
            )
