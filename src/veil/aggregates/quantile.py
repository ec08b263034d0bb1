"""Quantiles — QUANTILE_CONT(x, q), PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY x), MEDIAN (q =
1/2), MIN (q = 0) and MAX (q = 1) — chosen by the exponential mechanism over bucket edges of the
bounds (``veil.release.quantiles``). The released value is the chosen candidate; there is no
error bar (the mechanism's error is not a noise of known law around the truth).
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.base import AggregateKind, Call, Expected, Group, Read


class _Quantile(AggregateKind):
    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("quantile", "quantile"),)

    def estimate(self, g: Group) -> float:
        qm = g.noise("quantile")
        return float(qm.centre + qm.step * g.value("quantile"))

    def halfwidth(self, g: Group, value: float, level: float) -> None:
        return None

    def expected(self, e: Expected, level: float) -> str:
        return "no error bar (exponential mechanism)"


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


@register
class Min(_Quantile):
    name = "min"
    rank = 9
    constant_bar = True
    sql = ("MIN",)
    sql_nodes = (exp.Min,)
    quantile = "fixed"
    fixed_q = Fraction(0)


@register
class Max(_Quantile):
    name = "max"
    rank = 10
    constant_bar = True
    sql = ("MAX",)
    sql_nodes = (exp.Max,)
    quantile = "fixed"
    fixed_q = Fraction(1)
