"""The closed set of exact statistics the engine computes per group — each with its
sensitivity and its SQL, side by side. Privacy-critical: every released aggregate is
post-processing of these statistics once noised (``veil.aggregates``), so these bounds and
this SQL are all the privacy argument rests on.

Per group, over the bounded rows (``veil.compile.lower`` builds them and provides the per-row
terms :class:`PerRow`):

- ``count``: the number of rows, ``COUNT(*)``; a unit changes it by at most R;
- ``count_units``: the number of distinct units, ``SUM(__rn = 1)`` (``COUNT(*)`` when each
  unit keeps one row); at most 1;
- ``sum``: Σ v with v = clamp(round((clamp(x) − c)/step), −limit, limit); at most R·limit;
- ``sum_squares``: Σ (2w − limit) with w = clamp(round(((clamp(x) − c)/step)²/limit), 0,
  limit); at most R·limit;
- ``quantile``: row counts per bucket clamp(floor((clamp(x) − c)/step), 0, limit − 1), one
  statement per measurement; the score −|rank − q·n| of a candidate moves by at most
  R·max(q, 1 − q).

Sensitivities come from bounds and contribution limits only — never from data.

Proof note. Neighbouring datasets differ by all rows of one privacy unit (DESIGN §1). After
bounding, the unit has rows in at most G = :func:`effective_groups` groups and at most R =
``max_rows_per_group`` rows in each. Every per-row integer the engine sums lies in
[−limit, limit] (clamped in SQL *after* rounding, so no float value can escape), hence per group
the unit changes

- ``count`` by at most R, ``count_units`` by at most 1,
- ``sum`` / ``sum_squares`` by at most R·limit,

and it touches at most G groups. So the L1 sensitivity of the vector of per-group statistics is
G·(per-group bound) and the squared L2 sensitivity is G·(per-group bound)². For a quantile the
score −|rank(c) − q·n| of every candidate c moves by at most R·max(q, 1 − q) in each group
(each row moves the rank by at most 1 and q·n by q).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol, assert_never

from sqlglot import exp

from veil.compile.constants import literal
from veil.errors import InternalError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, Measurement, Mechanism, Statistic

__all__ = [
    "PerRow",
    "bucket_sql",
    "effective_groups",
    "per_group_bound",
    "rows_per_group",
    "sensitivity",
    "statistic_sql",
    "thresholded",
]


def rows_per_group(agg: Aggregate) -> int:
    """R: rows a unit may have in one group (1 when each row is its own unit)."""
    return 1 if agg.privacy_unit is None else agg.contribution.max_rows_per_group


def effective_groups(agg: Aggregate) -> int:
    """G: groups one unit can touch — 1 without GROUP BY or without a privacy unit, never more
    than the number of public keys, else ``max_groups``."""
    if not agg.keys or agg.privacy_unit is None:
        return 1
    g = agg.contribution.max_groups
    if agg.public_keys:
        possible = 1
        for k in agg.keys:
            possible *= len(k.labels())
            if possible >= g:
                return g
        return min(g, possible)
    return g


def per_group_bound(
    agg: Aggregate, statistic: Statistic, limit: int, quantile: Fraction | None = None
) -> Fraction:
    """How much one unit can change the statistic of one group (integer units)."""
    r = rows_per_group(agg)
    match statistic:
        case "count":
            return Fraction(r)
        case "count_units":
            return Fraction(1)
        case "sum" | "sum_squares":
            return Fraction(r * limit)
        case "quantile":
            if quantile is None:
                raise InternalError("a quantile measurement without q")
            return r * max(quantile, 1 - quantile)
        case _:
            assert_never(statistic)


def sensitivity(
    agg: Aggregate,
    statistic: Statistic,
    mechanism: Mechanism,
    limit: int,
    quantile: Fraction | None = None,
) -> Fraction:
    """The sensitivity a measurement is calibrated to (see the module proof note).

    L1 = G·b for ``discrete_laplace``; L2² = G·b² for ``discrete_gaussian``; the per-group score
    bound b for ``exponential`` (composition over the G groups is accounted in the budget).
    """
    return family(mechanism).sensitivity(
        per_group_bound(agg, statistic, limit, quantile), effective_groups(agg)
    )


def thresholded(measurements: Sequence[Measurement]) -> Measurement | None:
    """The noisy count partition selection thresholds: the row count if there is one, else the
    unit count (whose per-group bound is 1)."""
    for statistic in ("count", "count_units"):
        for m in measurements:
            if m.statistic == statistic:
                return m
    return None


# ── the statistics' SQL ────────────────────────────────────────────────────────────────────


class PerRow(Protocol):
    """The per-row terms the lowering provides (``veil.compile.lower``), each total: no value
    of a row can make them fail."""

    @property
    def wide(self) -> str | None:
        """The exact integer type sums accumulate in (None: the engine's own sum is exact)."""
        ...

    @property
    def integer_type(self) -> str: ...

    @property
    def one_row_per_unit(self) -> bool:
        """Whether each unit keeps at most one bounded row."""
        ...

    def scaled(self, m: Measurement) -> exp.Expr:
        """(clamp(x) − centre)/step as a double (|·| ≤ limit up to rounding)."""
        ...

    def integer(self, e: exp.Expr, lo: int, hi: int) -> exp.Expr:
        """``e`` rounded and clamped to ``[lo, hi]`` *before* the cast to an integer."""
        ...

    def cast(self, e: exp.Expr, to: str) -> exp.Expr: ...


def statistic_sql(m: Measurement, row: PerRow) -> exp.Expr:
    """The aggregate computing ``m``'s statistic per group (see the module docstring)."""
    match m.statistic:
        case "count":
            return exp.Count(this=exp.Star())
        case "count_units":
            if row.one_row_per_unit:
                return exp.Count(this=exp.Star())
            first = exp.If(
                this=exp.EQ(this=exp.column("__rn", quoted=True), expression=exp.Literal.number(1)),
                true=exp.Literal.number(1),
                false=exp.Literal.number(0),
            )
            return exp.Sum(this=first)
        case "sum":
            v = row.integer(row.scaled(m), -m.limit, m.limit)
        case "sum_squares":
            # w = round(scaled² / limit) ∈ [0, limit]; the engine sums 2w − limit
            square = exp.Div(
                this=exp.func("POWER", row.scaled(m), exp.Literal.number(2)),
                expression=literal(m.limit),
            )
            w = row.integer(square, 0, m.limit)
            v = exp.Sub(
                this=exp.Mul(this=exp.Literal.number(2), expression=w), expression=literal(m.limit)
            )
        case "quantile":
            raise InternalError(f"{m.name!r} is computed per bucket (bucket_sql)")
        case _:
            assert_never(m.statistic)
    if row.wide is not None:
        v = row.cast(v, row.wide)
    return exp.Sum(this=v)


def bucket_sql(m: Measurement, row: PerRow) -> exp.Expr:
    """The bucket of a row for quantile measurement ``m``: floor((clamp(x) − c)/step), clamped
    to a bucket before the cast (total)."""
    if m.statistic != "quantile":
        raise InternalError(f"{m.name!r} is not a quantile measurement")
    index = exp.func(
        "LEAST",
        exp.func("GREATEST", exp.func("FLOOR", row.scaled(m)), literal(0)),
        literal(m.limit - 1),
    )
    return row.cast(index, row.integer_type)
