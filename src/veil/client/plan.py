"""A query's request to the veil service (``POST /v1/query``, ``/v1/explain``): the query as
SQL or as a JSON ``plan`` — built by :class:`Plan`, calls mirroring ``Session.query``'s — and
its options, in the service's JSON form.

::

    from veil.client import Plan

    plan = Plan().where("age >= 18").group_by("state").agg("count").agg("median", "income")
    plan.to_json()  # {"where": ["age >= 18"], "group_by": ["state"], "aggregates": [...]}

Each call checks what can be decided without the service (an aggregate function the JSON form
has, a column where one is needed, a quantile only for ``quantile``, whole numbers for
``limit``) and raises :class:`~veil.errors.InvalidArgumentError` naming the value and the fix;
the service checks the rest (columns, predicates, bounds), free, as it does for SQL.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

from veil.errors import InvalidArgumentError

__all__ = ["PLAN_FUNCTIONS", "Bounds", "Number", "Plan", "number", "query_body"]

Number = int | float | str | Fraction | Decimal
Bounds = Mapping[str, tuple[Number, Number] | str | Mapping[str, str]] | str
"""Pairs per column; ``"auto"`` (every clamped column, or one column's value) and
``{"auto": KEY}`` (per group of a public GROUP BY key) find them under DP first."""

PLAN_FUNCTIONS: tuple[str, ...] = (
    "count",
    "count_distinct",
    "sum",
    "avg",
    "variance",
    "stddev",
    "var_pop",
    "stddev_pop",
    "quantile",
    "median",
    "min",
    "max",
)
"""The aggregate functions a JSON plan carries (``median``: the quantile 1/2, as
``Session.query(...).median``)."""

_NO_JSON = ("mode", "top_k")  # they need a public list of candidates, which a plan cannot give

Json = dict[str, Any]


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")
    return value


def number(value: object, name: str) -> int | float | str:
    """A number as the service reads it: a JSON number, or an exact decimal / fraction."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Fraction | Decimal):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float | Decimal) and not math.isfinite(value):
        raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
    if isinstance(value, Fraction):
        return str(value.numerator) if value.denominator == 1 else str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return value


def _whole(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"{what} must be a whole number ≥ 0, got {value!r}")
    return value


def _function(function: object) -> str:
    if function in PLAN_FUNCTIONS:
        return str(function)
    if function in _NO_JSON:
        raise InvalidArgumentError(
            f"aggregate {function!r} needs a public list of candidates, which a JSON plan does "
            "not carry; send this query as SQL"
        )
    close = difflib.get_close_matches(str(function), PLAN_FUNCTIONS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise InvalidArgumentError(
        f"aggregate {function!r} is not one a plan can ask for{hint} "
        f"(use one of {', '.join(PLAN_FUNCTIONS)})"
    )


@dataclass(frozen=True)
class Plan:
    """A query as ``Session.query``'s calls, for :meth:`veil.client.Client.query` and
    :meth:`~veil.client.Client.explain` (``plan=``). Immutable: each call returns a new plan.
    Its table is the dataset the client names."""

    predicates: tuple[str, ...] = ()
    keys: tuple[str | Json, ...] = ()
    aggregates: tuple[Json, ...] = ()
    having_predicate: str | None = None
    sort_keys: tuple[str | Json, ...] = ()
    limit_count: int | None = None
    limit_offset: int = 0
    selected: tuple[str, ...] | None = None

    # rows ------------------------------------------------------------------------------------

    def where(self, predicate: str) -> Plan:
        """Keep the rows where ``predicate`` (SQL text) holds; several calls: AND."""
        return replace(self, predicates=(*self.predicates, _text(predicate, "where()")))

    def group_by(self, *columns: str) -> Plan:
        """Group by columns (keys released by DP partition selection, or the declared domain)."""
        keys = [_text(c, "a group_by() column") for c in columns]
        return replace(self, keys=(*self.keys, *keys))

    def group_by_keys(
        self, column: str, keys: Iterable[str | int | float | bool | None], alias: str | None = None
    ) -> Plan:
        """Group by ``column`` over the public list ``keys``: every key released, no δ spent."""
        if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
            raise InvalidArgumentError(
                f"group_by_keys() takes a list of the public keys, e.g. ['CA', 'NY'], got {keys!r}"
            )
        listed = list(keys)
        for key in listed:
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise InvalidArgumentError(
                    f"a public key must be a string, number, boolean or None, got {key!r}"
                )
        spec: Json = {"column": _text(column, "group_by_keys()'s column"), "keys": listed}
        return replace(self, keys=(*self.keys, _aliased(spec, alias)))

    def bin(self, column: str, *edges: Number, alias: str | None = None) -> Plan:
        """Group by histogram bins ``[e0, e1), …, [e_{n-1}, en]`` of ``column``."""
        if len(edges) < 2:
            raise InvalidArgumentError(
                f"bin({column!r}, …) needs at least two edges, e.g. bin({column!r}, 0, 30, 60)"
            )
        spec: Json = {
            "column": _text(column, "bin()'s column"),
            "bins": [number(e, "a bin edge") for e in edges],
        }
        return replace(self, keys=(*self.keys, _aliased(spec, alias)))

    # aggregates ------------------------------------------------------------------------------

    def agg(
        self,
        function: str,
        column: str | None = None,
        alias: str | None = None,
        *,
        quantile: Number | None = None,
    ) -> Plan:
        """Add an aggregate by name (:data:`PLAN_FUNCTIONS`): ``agg("count")``,
        ``agg("sum", "income")``, ``agg("quantile", "age", quantile="9/10")``."""
        name = _function(function)
        if name == "median":
            if quantile is not None:
                raise InvalidArgumentError(
                    f"median is the quantile 1/2 and takes no quantile (got {quantile!r}); "
                    "use agg('quantile', column, quantile=q)"
                )
            name, quantile = "quantile", "1/2"
        spec: Json = {"function": name}
        if column is not None:
            spec["column"] = _text(column, f"{function}()'s column")
        elif name != "count":
            raise InvalidArgumentError(
                f"{function} needs a column, e.g. agg({function!r}, 'income')"
            )
        if name == "quantile":
            if quantile is None:
                raise InvalidArgumentError(
                    "quantile needs its q, e.g. agg('quantile', 'age', quantile='9/10')"
                )
            spec["quantile"] = number(quantile, "the quantile")
        elif quantile is not None:
            raise InvalidArgumentError(f"{function} takes no quantile (got {quantile!r})")
        return replace(self, aggregates=(*self.aggregates, _aliased(spec, alias)))

    def count(self, alias: str | None = None, *, column: str | None = None) -> Plan:
        """COUNT(*) (or COUNT(column): rows where ``column`` is not NULL)."""
        return self.agg("count", column, alias)

    def count_distinct(self, column: str, alias: str | None = None) -> Plan:
        """COUNT(DISTINCT column) — only of the privacy unit: the number of units."""
        return self.agg("count_distinct", column, alias)

    def sum(self, column: str, alias: str | None = None) -> Plan:
        """SUM(column) of values clamped to the column's bounds."""
        return self.agg("sum", column, alias)

    def avg(self, column: str, alias: str | None = None) -> Plan:
        """AVG(column) of values clamped to the column's bounds."""
        return self.agg("avg", column, alias)

    def variance(self, column: str, alias: str | None = None) -> Plan:
        """VARIANCE(column): the sample variance of clamped values."""
        return self.agg("variance", column, alias)

    def stddev(self, column: str, alias: str | None = None) -> Plan:
        """STDDEV(column): the sample standard deviation of clamped values."""
        return self.agg("stddev", column, alias)

    def quantile(self, column: str, q: Number, alias: str | None = None) -> Plan:
        """QUANTILE_CONT(column, q) of clamped values."""
        return self.agg("quantile", column, alias, quantile=q)

    def median(self, column: str, alias: str | None = None) -> Plan:
        """MEDIAN(column): the quantile 1/2."""
        return self.agg("median", column, alias)

    def min(self, column: str, alias: str | None = None) -> Plan:
        """MIN(column): the 0-quantile of clamped values."""
        return self.agg("min", column, alias)

    def max(self, column: str, alias: str | None = None) -> Plan:
        """MAX(column): the 1-quantile of clamped values."""
        return self.agg("max", column, alias)

    # released values -------------------------------------------------------------------------

    def having(self, predicate: str) -> Plan:
        """Keep released groups where ``predicate`` over output columns holds (once a plan:
        combine conditions with AND in the one predicate)."""
        if self.having_predicate is not None:
            raise InvalidArgumentError(
                f"the plan has a having() already ({self.having_predicate!r}); a JSON plan "
                f"has one: give both conditions in it, joined by AND"
            )
        return replace(self, having_predicate=_text(predicate, "having()"))

    def order_by(self, *columns: str, descending: bool = False) -> Plan:
        """Order released rows by output columns (``descending`` for the ones given here)."""
        names = [_text(c, "an order_by() column") for c in columns]
        keys = [{"column": c, "descending": True} if descending else c for c in names]
        return replace(self, sort_keys=(*self.sort_keys, *keys))

    def limit(self, count: int, offset: int = 0) -> Plan:
        """Keep the first ``count`` released rows after ``offset``."""
        return replace(
            self,
            limit_count=_whole(count, "limit()'s count"),
            limit_offset=_whole(offset, "offset"),
        )

    def select(self, *columns: str) -> Plan:
        """Choose and order the output columns (default: keys, then aggregates)."""
        return replace(self, selected=tuple(_text(c, "a select() column") for c in columns))

    # the JSON form ---------------------------------------------------------------------------

    def to_json(self) -> Json:
        """The plan in the service's JSON form (``PlanBody``); only the parts given."""
        if not self.aggregates:
            raise InvalidArgumentError(
                "a plan needs at least one aggregate, e.g. Plan().agg('count'); nothing was sent"
            )
        out: Json = {"aggregates": [dict(a) for a in self.aggregates]}
        if self.predicates:
            out["where"] = list(self.predicates)
        if self.keys:
            out["group_by"] = [k if isinstance(k, str) else dict(k) for k in self.keys]
        if self.having_predicate is not None:
            out["having"] = self.having_predicate
        if self.sort_keys:
            out["order_by"] = [k if isinstance(k, str) else dict(k) for k in self.sort_keys]
        if self.limit_count is not None:
            out["limit"] = self.limit_count
            if self.limit_offset:
                out["offset"] = self.limit_offset
        if self.selected is not None:
            out["select"] = list(self.selected)
        return out


def _aliased(spec: Json, alias: str | None) -> Json:
    if alias is not None:
        spec["alias"] = _text(alias, "an alias")
    return spec


def plan_json(plan: object) -> Json:
    """``plan`` (a :class:`Plan` or a mapping in the JSON form) as the request's ``plan``;
    a mapping is sent as given, for the service to check (free)."""
    if isinstance(plan, Plan):
        return plan.to_json()
    if isinstance(plan, Mapping):
        return {str(k): v for k, v in plan.items()}
    raise InvalidArgumentError(
        f"plan must be a veil.client.Plan or its JSON form (a dict such as "
        f"{{'aggregates': [{{'function': 'count'}}]}}), got {type(plan).__name__}"
    )


def _targets(
    target: str | Sequence[str] | None,
    references: Mapping[str, float] | None,
    min_group_size: int | None,
) -> dict[str, Any]:
    """The accuracy targets of a request (the service checks them, free)."""
    out: dict[str, Any] = {}
    if target is not None:
        out["target"] = [target] if isinstance(target, str) else list(target)
    if references is not None:
        out["references"] = {str(c): float(v) for c, v in references.items()}
    if min_group_size is not None:
        out["min_group_size"] = min_group_size
    return out


def _limits(limits: object, share: Number | None) -> dict[str, Any]:
    """The request fields of ``limits="auto"`` (checked by the service, free)."""
    out: dict[str, Any] = {}
    if limits is not None:
        out["limits"] = limits
    if share is not None:
        out["limits_share"] = number(share, "limits_share")
    return out


def query_body(
    dataset: str,
    sql: str | None,
    plan: Plan | Mapping[str, Any] | None,
    *,
    epsilon: Number | None = None,
    delta: Number | None = None,
    bounds: Bounds | None = None,
    bounds_share: Number | None = None,
    max_groups: int | None = None,
    max_rows_per_group: int | None = None,
    max_rows: int | None = None,
    limits: object = None,
    limits_share: Number | None = None,
    target: str | Sequence[str] | None = None,
    references: Mapping[str, float] | None = None,
    min_group_size: int | None = None,
    weights: str | Literal[False] | None = None,
) -> dict[str, Any]:
    """A query or explain request: the query as exactly one of ``sql`` and ``plan``, and only
    the options given (the owner's apply otherwise; the service checks what they mean, free)."""
    body: dict[str, Any] = {"dataset": dataset}
    if (sql is None) == (plan is None):
        raise InvalidArgumentError(
            "give the query as exactly one of sql (text) or plan= (a veil.client.Plan or its "
            "JSON form), "
            + ("not both" if sql is not None else "got neither")
            + "; nothing was sent"
        )
    if plan is not None:
        body["plan"] = plan_json(plan)
    elif isinstance(sql, str):
        body["sql"] = sql
    else:
        raise InvalidArgumentError(f"sql must be a string, got {type(sql).__name__}")
    if epsilon is not None:
        body["epsilon"] = number(epsilon, "epsilon")
    if delta is not None:
        body["delta"] = number(delta, "delta")
    if bounds is not None:
        body["bounds"] = _bounds(bounds)
    if bounds_share is not None:
        body["bounds_share"] = number(bounds_share, "bounds_share")
    for name, value in (
        ("max_groups", max_groups),
        ("max_rows_per_group", max_rows_per_group),
        ("max_rows", max_rows),
    ):
        if value is not None:
            body[name] = value
    body |= _limits(limits, limits_share)
    body |= _targets(target, references, min_group_size)
    if weights is not None:
        body["weights"] = weights
    return body


def _bounds(bounds: Bounds) -> str | dict[str, Any]:
    """``bounds`` in the request's JSON form (the service checks what it means, free)."""
    if isinstance(bounds, str):
        return bounds
    out: dict[str, Any] = {}
    for c, value in bounds.items():
        if isinstance(value, str | Mapping):
            out[c] = value if isinstance(value, str) else dict(value)
        else:
            lo, hi = value
            out[c] = [
                number(lo, f"the lower bound of {c!r}"),
                number(hi, f"the upper bound of {c!r}"),
            ]
    return out
