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
- ``mode``: row counts per public candidate (the integers c, c + 1, …, c + limit − 1 of the
  bounds; rows outside them count for none), one statement per measurement; a candidate's
  count moves by at most R (``veil.release.modes``).

Sensitivities come from bounds and contribution limits only — never from data.

Proof note. Neighbouring datasets differ by all rows of one privacy unit (DESIGN §1). After
bounding, the unit has c_g rows in group g with 0 ≤ c_g ≤ R, at most G groups with c_g > 0
and Σ c_g ≤ T (``max_rows``; T = G·R when not given), G capped by the public keys
(:func:`reach`). Every per-row integer the engine sums lies in [−b, b] with b = ``limit``
(clamped in SQL *after* rounding, so no float value can escape; b = 1 for a row count), hence
group g's statistic moves by at most c_g·b, and ``count_units`` by at most 1 in each of at most
G' = min(G, T) groups. So

- L1 = Σ_g c_g·b ≤ b·min(T, G·R) (attained: fill groups with R rows until T is used);
- L2² = Σ_g (c_g·b)² ≤ b²·(q·R'² + r²) with R' = min(R, T), q·R' + r = min(T, G·R), 0 ≤ r < R'
  (the greedy allocation). Proof: sort any feasible c decreasingly; its partial sums are at most
  min(k·R', total), the greedy vector's, so c is weakly submajorised by it and Σ φ(c_g) is at
  most the greedy vector's for the convex increasing φ(x) = x² (Tomić–Weyl; Marshall–Olkin
  5.A.1); ``tests/compile/test_reach.py`` checks it by brute force on small cases.

For a quantile the score −|rank(c) − q·n| of every candidate moves by at most c_g·max(q, 1 − q)
in group g (each row moves the rank by at most 1 and q·n by q); the per-group mechanism is
calibrated to R'·max(q, 1 − q), so group g costs ε_g·c_g/R' and the unit at most
ε_g·min(T, G·R)/R' (pure ε) or (ε_g²/8)·Σ(c_g/R')² (zCDP, bounded range) —
:attr:`Reach.spread` and :attr:`Reach.spread_squared`; without T these are G and G.

Rows without a unit, ``contributions=k``: a person's ≤ k rows are an allocation with G = R =
T = k, so the same bounds hold with neighbours that add or remove one person's rows —
sensitivity scaling, exact for every statistic here since each is a sum over rows (or a score
that is). No group-privacy factor is needed for these; ``veil.accounting.conversions``'s
``group_privacy`` is what applies to a mechanism that is not (a row-level loss ε, δ or ρ).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol, assert_never

from sqlglot import exp

from veil.compile.constants import literal
from veil.errors import InternalError
from veil.noise.families import family
from veil.noise.reach import Reach
from veil.plan.nodes import Aggregate, Measurement, Mechanism, Statistic

__all__ = [
    "PerRow",
    "Reach",
    "bucket_sql",
    "effective_groups",
    "mode_bucket_sql",
    "per_group_bound",
    "per_row_bound",
    "reach",
    "rows_per_group",
    "sensitivity",
    "statistic_sql",
    "thresholded",
]


def _limits(agg: Aggregate) -> tuple[int, int, int | None]:
    """(G, R, T) of the aggregation's units, G already capped by the public keys.

    Without a privacy unit each row is a unit (1, 1, none) — unless the owner declared
    ``contributions=k`` (``Contribution.max_rows``): each person then has at most k rows, in
    any groups, which is the reach of (k, k, k)."""
    c = agg.contribution
    if agg.privacy_unit is None:
        k = c.max_rows or 1
        g, r, t = k, k, (k if c.max_rows is not None else None)
    else:
        g, r, t = c.max_groups, c.max_rows_per_group, c.max_rows
    if not agg.keys:
        return 1, r, t
    if agg.public_keys:
        possible = 1
        for k_ in agg.keys:
            possible *= len(k_.labels())
            if possible >= g:
                return g, r, t
        return min(g, possible), r, t
    return g, r, t


def reach(agg: Aggregate, statistic: Statistic = "count") -> Reach:
    """The :class:`Reach` of one unit for ``statistic``: the rows' reach, or for
    ``count_units`` (1 per group a unit touches) that of one 'row' per group."""
    g, r, t = _limits(agg)
    rows = Reach.of(g, r, t)
    if statistic == "count_units":
        return Reach.of(rows.groups, 1)
    return rows


def rows_per_group(agg: Aggregate) -> int:
    """R': rows a unit may have in one group (1 when each row is its own unit)."""
    return 1 if agg.privacy_unit is None else reach(agg).rows


def effective_groups(agg: Aggregate) -> int:
    """G': groups one unit can touch — 1 without GROUP BY, never more than the number of
    public keys nor than the total-rows bound, else ``max_groups``."""
    return reach(agg).groups


def per_row_bound(statistic: Statistic, limit: int, quantile: Fraction | None = None) -> Fraction:
    """How much one row can change the statistic of its group (integer units): 1 for a
    count, ``limit`` for a fixed-point sum, max(q, 1 − q) for a quantile's score; for
    ``count_units``, 1 per group (see :func:`reach`)."""
    match statistic:
        case "count" | "count_units":
            return Fraction(1)
        case "sum" | "sum_squares":
            return Fraction(limit)
        case "quantile":
            if quantile is None:
                raise InternalError("a quantile measurement without q")
            return max(quantile, 1 - quantile)
        case "mode":
            return Fraction(1)  # one row adds 1 to one candidate's count (veil.release.modes)
        case _:
            assert_never(statistic)


def per_group_bound(
    agg: Aggregate, statistic: Statistic, limit: int, quantile: Fraction | None = None
) -> Fraction:
    """How much one unit can change the statistic of one group (integer units)."""
    return reach(agg, statistic).rows * per_row_bound(statistic, limit, quantile)


def sensitivity(
    agg: Aggregate,
    statistic: Statistic,
    mechanism: Mechanism,
    limit: int,
    quantile: Fraction | None = None,
) -> Fraction:
    """The sensitivity a measurement is calibrated to (see the module proof note).

    L1 = b·total for ``discrete_laplace``; L2² = b²·squares for ``discrete_gaussian``; the
    per-group score bound b·R' for ``exponential`` (composition over the groups is accounted
    in the budget with :attr:`Reach.spread`), b the per-row bound.
    """
    return family(mechanism).sensitivity(
        per_row_bound(statistic, limit, quantile), reach(agg, statistic)
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

    def clamp(self, e: exp.Expr, lo: exp.Expr | None, hi: exp.Expr) -> exp.Expr:
        """A row's (non-NULL) double ``e`` clamped into ``[lo, hi]`` (``lo`` None: ``e`` is
        never below it)."""
        ...

    def above_centre(self, m: Measurement) -> bool:
        """Whether :meth:`scaled` of ``m`` is never negative."""
        ...

    def cell(self, m: Measurement) -> exp.Expr | None:
        """Quantile ``m``'s cell as a double in ``[0, limit − 1]`` with no clamp of its own,
        equal to the clamped formula's for every row; None where there is no such form."""
        ...

    def cast(self, e: exp.Expr, to: str) -> exp.Expr: ...

    def by_stratum(
        self, m: Measurement, values: Sequence[exp.Expr], otherwise: exp.Expr
    ) -> exp.Expr:
        """``values[i]`` for a row of stratum i of ``m`` (``veil.compile.strata``),
        ``otherwise`` for a row of none."""
        ...


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
        case "sum" if m.strata:
            v = _stratified(m, row)
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
        case "mode":
            raise InternalError(f"{m.name!r} is computed per candidate (mode_bucket_sql)")
        case _:
            assert_never(m.statistic)
    if row.wide is not None:
        v = row.cast(v, row.wide)
    return exp.Sum(this=v)


def _stratified(m: Measurement, row: PerRow) -> exp.Expr:
    """The per-row integer of a sum stratified by its bins (``veil.compile.strata``), clamped
    in SQL to the range its stratum's noise was calibrated for.

    Contract: a row of stratum i contributes v ∈ [shift_i − limit_i, shift_i + limit_i] ∩
    [−limit, limit] (a row of no stratum, v ∈ [−limit, limit]), whatever the engine's double
    rounding of x, of x − c, or of the bin's comparisons did — so stratum i's re-centred sum
    Σ (v − shift_i) moves by at most limit_i per row, the bound its noise is scaled to. The
    clamp follows the rounding and precedes the cast (total, as :meth:`PerRow.integer`)."""
    lows = [literal(max(s.shift - s.limit, -m.limit)) for s in m.strata]
    highs = [literal(min(s.shift + s.limit, m.limit)) for s in m.strata]
    lo = row.by_stratum(m, lows, literal(-m.limit))
    hi = row.by_stratum(m, highs, literal(m.limit))
    clamped = row.clamp(exp.func("ROUND", row.scaled(m)), lo, hi)
    return row.cast(clamped, row.integer_type)


def bucket_sql(m: Measurement, row: PerRow, to: str | None = None) -> exp.Expr:
    """The bucket of a row for quantile measurement ``m``: floor((clamp(x) − c)/step), clamped
    to a bucket before the cast (total; its lower end only where the scaled value could be
    negative, which it cannot when every clamp's lower bound is at least c: ``above_centre``;
    its upper end by the column's clamp alone where ``row.cell`` has a form), cast to ``to``
    (an integer type holding every bucket; default the row's integer type)."""
    if m.statistic != "quantile":
        raise InternalError(f"{m.name!r} is not a quantile measurement")
    index = row.cell(m)
    if index is None:
        lowest = None if row.above_centre(m) else literal(0)
        index = row.clamp(exp.func("FLOOR", row.scaled(m)), lowest, literal(m.limit - 1))
    return row.cast(index, to or row.integer_type)


def mode_bucket_sql(m: Measurement, x: exp.Expr, row: PerRow) -> exp.Expr:
    """The candidate of a row for mode measurement ``m``: x − centre when the (double) value
    ``x`` of the integer column lies in [centre, centre + limit − 1], else NULL (the row counts
    for no candidate). Total: the offset is rounded and clamped before the cast; the bounds are
    integers of magnitude ≤ 2^52, so no other integer's double falls inside them."""
    if m.statistic != "mode":
        raise InternalError(f"{m.name!r} is not a mode measurement")
    top = m.centre + m.limit - 1
    inside = exp.And(
        this=exp.GTE(this=x.copy(), expression=literal(m.centre)),
        expression=exp.LTE(this=x.copy(), expression=literal(top)),
    )
    offset = row.integer(exp.Sub(this=x.copy(), expression=literal(m.centre)), 0, m.limit - 1)
    return exp.Case().when(inside, offset)
