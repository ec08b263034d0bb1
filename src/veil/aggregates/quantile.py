"""Quantiles — QUANTILE_CONT(x, q), PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x), MEDIAN (q =
1/2), MIN and MAX — chosen by the exponential mechanism over a fine grid of the bounds, scored
by rank intervals (``veil.release.quantiles``). The released value is the chosen candidate.

Its confidence statement is in ranks, not values: with probability ≥ level the released value
lies between the true order statistics of ranks τ − r and τ + r (τ = q·n; MIN and MAX aim k
ranks in, see ``extreme_rank``), r = scale·ln(cells/(1 − level)) from the mechanism's tail
bound (:func:`veil.noise.ranks.rank_halfwidth`). It depends on the plan alone, so
``explain`` shows it before anything is spent. A value interval would need the data's order
statistics around the release — private values a bar may not read — so the value bar stays
``None`` (the rank statement is the honest one).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray
from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.base import (
    AggregateKind,
    Call,
    ColumnModel,
    Expected,
    Group,
    NoiseModel,
    Read,
)
from veil.noise.ranks import EXTREME_MISS, extreme_rank, rank_halfwidth


class _Quantile(AggregateKind):
    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("quantile", "quantile"),)

    def estimate(self, g: Group) -> float:
        qm = g.noise("quantile")
        return float(qm.centre + qm.step * g.value("quantile"))

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[float] | None:
        """:meth:`estimate` for every group: centre + step·j as one integer ratio per group,
        divided once — Python's integer division is correctly rounded, as ``float`` of the
        Fraction is, so each value is the same double."""
        name = model.reads("quantile")
        if name is None:
            return None
        qm = noise[name]
        centre, step = qm.centre, qm.step
        den = centre.denominator * step.denominator
        base = centre.numerator * step.denominator
        per = step.numerator * centre.denominator
        return [(base + per * j) / den for j in columns[name].tolist()]

    def halfwidth(self, g: Group, value: float, level: float) -> None:
        return None

    def expected(self, e: Expected, level: float) -> str:
        qm = e.noise("quantile")
        r = rank_halfwidth(qm.scale, qm.limit, level)
        return f"rank within ±{r:.3g} rows of the target (exponential mechanism)"


@register
class Quantile(_Quantile):
    name = "quantile"
    rank = 8
    constant_bar = True
    sql = ("MEDIAN", "QUANTILE_CONT(col, q)", "PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col)")
    quantile = "argument"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        """``median_age`` for q = 1/2, else ``p90_age``, ``p99_9_age``…"""
        q = Fraction(0) if q is None else q
        if q == Fraction(1, 2):
            return f"median_{column}"
        pct = q * 100
        text = str(pct.numerator) if pct.denominator == 1 else f"{float(pct):g}".replace(".", "_")
        return f"p{text}_{column}"


class _Extreme(_Quantile):
    """MIN and MAX: the value k ranks in from their end (``veil.noise.ranks.extreme_rank``),
    which the note and ``explain`` name: not the extreme itself, which no ε-DP release over
    the grid can reach."""

    end = ""

    def expected(self, e: Expected, level: float) -> str:
        qm = e.noise("quantile")
        k = float(extreme_rank(qm.scale, qm.limit))
        r = rank_halfwidth(qm.scale, qm.limit, level)
        rank = f"rank {k:g}" if self.end == "bottom" else f"rank n − {k:g}"
        return (
            f"the value {k:g} ranks from the {self.end} ({rank} of n; the median in a group of "
            f"fewer than {2 * k:g} rows), not the {self.name}imum: aimed nearer, the noise over "
            f"{qm.limit} candidates would release a value outside the data with probability "
            f"> {float(EXTREME_MISS):.0%} (fewer candidates, quantile_buckets=, aim nearer); "
            f"its rank within ±{r:.3g} rows of that at {level:.0%} (exponential mechanism)"
        )


@register
class Min(_Extreme):
    name = "min"
    rank = 9
    constant_bar = True
    sql = ("MIN",)
    sql_nodes = (exp.Min,)
    quantile = "fixed"
    fixed_q = Fraction(0)
    end = "bottom"


@register
class Max(_Extreme):
    name = "max"
    rank = 10
    constant_bar = True
    sql = ("MAX",)
    sql_nodes = (exp.Max,)
    quantile = "fixed"
    fixed_q = Fraction(1)
    end = "top"
